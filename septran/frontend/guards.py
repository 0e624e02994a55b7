"""Guards in a compute: ``task.where(task.global_index(X, 1, j) < n, a, b)`` narrows ``j`` in ``a`` and ``b``.

One reading of a condition serves two stages: the frontend, where a plain read
inside a guard on its index ties no extents (``compute_operands``), and the
verify pass, which proves that read with the index's range narrowed
(``lowering/verify_reads``). Only ``global_index(X, a, j) <op> n`` with ``<op>``
one of ``< <= > >=`` and ``n`` an integer expression (a shape, a size, a
whole number) is a guard: ``==`` and comparisons of data narrow nothing.
"""
from __future__ import annotations

import math
from typing import Optional

from septran.frontend import elementwise as el

FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def guard(cond: el.Elem) -> Optional[tuple[str, el.GlobalIndex, el.Elem]]:
    """(op, position, bound) with the position on the left, where ``cond`` is a guard; else None."""
    if not (isinstance(cond, el.Bin) and cond.op in FLIP):
        return None
    op, pos, other = cond.op, cond.lhs, cond.rhs
    if isinstance(other, el.GlobalIndex):
        op, pos, other = FLIP[op], other, pos
    if not isinstance(pos, el.GlobalIndex):
        return None
    if isinstance(other, el.IntExpr):
        return op, pos, other
    if isinstance(other, el.Num) and math.isfinite(other.value) and other.value == int(other.value):
        return op, pos, other
    return None


def narrowed_loads(value: el.Elem) -> dict[int, frozenset[str]]:
    """``id(load)`` -> the compute indices a guard narrows wherever that load stands (a load standing in two
    places, one guarded and one not: the names narrowed in both)."""
    out: dict[int, frozenset[str]] = {}

    def walk(e: el.Elem, names: frozenset) -> None:
        if isinstance(e, el.Call) and e.fn == "where":
            walk(e.args[0], names)
            g = guard(e.args[0])
            inner = names | {g[1].idx} if g is not None else names
            for branch in e.args[1:]:
                walk(branch, inner)
            return
        if isinstance(e, el.Load):
            out[id(e)] = out[id(e)] & names if id(e) in out else names
        for c in el.children(e):
            walk(c, names)

    walk(value, frozenset())
    return out
