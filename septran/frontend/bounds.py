"""Bounds on the integers a logic file writes, checked while tracing.

TileLang indexes with int32: a loop extent, a tile size or an index constant
known while tracing must fit it (``task.range(10**12)`` would run for hours,
``10**400`` would overflow deep inside TileLang). Symbolic extents are checked
once shapes are known, by the lowering's verification.
"""
from __future__ import annotations

from septran.errors import FrontendError, SourceLoc
from septran.expr import BinOp, Const, Expr

INT32_MAX = 2**31 - 1  # the largest extent, tile size or index constant (TileLang's int32 index type)
MAX_AXIS = 32  # the largest axis a logic may name (A.shape[k], task.global_size(X, k))


def _consts(e: Expr):
    if isinstance(e, Const):
        yield e.value
    elif isinstance(e, BinOp):
        yield from _consts(e.lhs)
        yield from _consts(e.rhs)


def _shown(value: int) -> str:
    if abs(value) >= 10**4000:  # str() refuses more than 4300 digits
        return "a number of more than 4000 digits"
    digits = len(str(abs(value)))
    return str(value) if digits <= 20 else f"{str(value)[:8]}... ({digits} digits)"


def int32_problem(e: Expr):
    """What is wrong with ``e`` as an index expression (a constant that does not fit int32), or None."""
    for c in _consts(e):
        if not -INT32_MAX <= c <= INT32_MAX:
            return f"the constant {_shown(c)} does not fit TileLang's int32 index type (at most {INT32_MAX})"
    return None


def check_index_expr(e: Expr, what: str, loc: SourceLoc) -> Expr:
    """``e`` when each of its constants fits int32."""
    problem = int32_problem(e)
    if problem:
        raise FrontendError(f"{what}: {problem}", loc)
    return e


def check_extent(e: Expr, what: str, loc: SourceLoc) -> Expr:
    """A loop extent or a tile size: its constants fit int32 and, when known now, it is 0 .. 2^31 - 1."""
    check_index_expr(e, what, loc)
    if isinstance(e, Const) and e.value < 0:
        raise FrontendError(f"{what}: the extent {e.value} is negative", loc)
    return e


def check_axis(axis, what: str, loc: SourceLoc) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < MAX_AXIS:
        raise FrontendError(f"{what}: axis {axis if isinstance(axis, int) and abs(axis) < 10**6 else '...'!s} "
                            f"must be an int from 0 to {MAX_AXIS - 1}", loc)
    return axis
