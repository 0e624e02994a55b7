"""Reductions over any axis of a tile of any rank: ``task.call_primitive("reduce_sum", out, X, axis=0)``.

``reduce_sum``, ``reduce_max`` and ``reduce_min`` fold one axis of X into
``out``, which has X's other dimensions in order: ``out = op(out, op over
axis of X)`` (they accumulate, so a sequential loop over tiles of X can fold
them one by one; fill ``out`` first). A leaf's parameters have no rank until
a primitive gives them one, so ``rank=`` says X's (2 unless given). The
signature is built per call, with one letter per dimension as the fixed
primitives have, so shape ties follow (out's dimensions equal X's others).
"""
from __future__ import annotations

import difflib
from types import MappingProxyType

from septran.errors import FrontendError
from septran.frontend.ir import Privilege
from septran.frontend.primitives import PrimitiveSig

OPS = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min"}
_LETTERS = "abcdefgh"


def signature(name: str, options: dict, loc) -> PrimitiveSig:
    """The signature of one call, or a FrontendError at the user's line saying what to change."""
    unknown = sorted(set(options) - {"axis", "rank"})
    if unknown:
        close = [difflib.get_close_matches(k, ("axis", "rank"), n=1) for k in unknown]
        hint = "; ".join(f"{k}= -> {c[0]}=" for k, c in zip(unknown, close) if c) or None
        raise FrontendError(f"primitive {name!r} takes the keywords axis= and rank=, not {', '.join(unknown)}", loc,
                            hint=f"did you mean {hint}" if hint else None)
    if "axis" not in options:
        raise FrontendError(f"primitive {name!r} needs axis= (the dimension of X it reduces)", loc,
                            hint=f'task.call_primitive("{name}", out, X, axis=0)')
    axis, rank = options["axis"], options.get("rank", 2)
    for what, v in (("axis", axis), ("rank", rank)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise FrontendError(f"primitive {name!r}: {what}= must be an int, got {type(v).__name__}", loc)
    if not 1 <= rank <= len(_LETTERS):
        raise FrontendError(f"primitive {name!r}: rank= must be 1 to {len(_LETTERS)}, got {rank}", loc)
    if not -rank <= axis < rank:
        raise FrontendError(f"primitive {name!r}: axis={axis} is not a dimension of a {rank}-D tile", loc,
                            hint=f"axis is counted in X, from {-rank} to {rank - 1}")
    axis %= rank
    letters = _LETTERS[:rank]
    op = OPS[name]
    return PrimitiveSig(
        name=name, kind="reduce_axis", params=("out", "X"), privileges=(Privilege.READ_WRITE, Privilege.READ),
        dims=(letters[:axis] + letters[axis + 1:], letters),
        meaning=f"out = {op}(out, {op} of X over axis {axis})",
        attrs=MappingProxyType({"op": op, "dim": axis}),
    )


def lookup(name: str, options: dict, loc, fixed: dict):
    """The signature ``task.call_primitive`` uses: one built for this call, a fixed one, or None (unknown)."""
    if name in OPS:
        return signature(name, options, loc)
    if options:
        raise FrontendError(f"primitive {name!r} takes no keywords, got {', '.join(sorted(options))}", loc)
    return fixed.get(name)
