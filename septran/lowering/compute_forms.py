"""Forms: a ``task.compute`` that one call of a target's vendor library computes whole.

The norms end in a write that scales each row: RMSNorm's ``Y[i, j] = X[i, j] * rstd[i] * W[j]``, LayerNorm's
``(X[i, j] - mean[i]) * rstd[i] * W[j] + B[j]``. As elementwise loops on the cpu a 16-bit row goes through float32
tiles (the copies widen and narrow it: g++ converts float16 in a loop only in software); a vendor function that
widens a chunk of the row in L1, computes and narrows it reads X and writes Y where they lie, as inductor's code
does. A leaf implementation says which forms it computes (target.yaml ``implements: [row_scale, row_normalize]``);
a mapping binds a leaf task to it; a compute whose expression is a form's, operand for operand and in the order
written, then runs as that implementation's call, typed and checked as any primitive's (its operands' memories,
one element type for X and Y, W and B of X's type or another the implementation declares (``WEIGHTS``), the row
statistics float32). A compute that is no form is refused at the binding,
saying which forms the implementation computes. The logic is unchanged: other targets run the same compute as loops.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Optional

from septran.frontend import elementwise as el
from septran.frontend.ir import PrimCall, Privilege
from septran.frontend.primitives import PrimitiveSig

R, W = Privilege.READ, Privilege.WRITE
FORMS = MappingProxyType({
    "row_scale": PrimitiveSig(
        name="row_scale", kind="row_scale", params=("Y", "X", "s", "w"), privileges=(W, R, R, R),
        dims=("ij", "ij", "i", "j"), meaning="Y[i, j] = X[i, j] * s[i] * w[j]", own_type=("s",)),
    "row_normalize": PrimitiveSig(
        name="row_normalize", kind="row_normalize", params=("Y", "X", "c", "s", "w", "b"), privileges=(W,) + (R,) * 5,
        dims=("ij", "ij", "i", "i", "j", "j"), meaning="Y[i, j] = (X[i, j] - c[i]) * s[i] * w[j] + b[j]",
        own_type=("c", "s")),
})
ELEMENT_OPS = MappingProxyType({"row_scale": 2, "row_normalize": 4})  # each form's arithmetic per element (cost model)
# The forms' per-column operands: of X's type, or of another type an implementation's operand_dtypes allows beside it
# (the cpu's: a float32 weight and bias beside 16-bit rows, as a model that keeps its norms' weights in float32 has)
WEIGHTS = ("w", "b")


def recognise(prim: PrimCall) -> Optional[PrimCall]:
    """``prim`` (a compute) as the form its expression is, its operands in the form's order; None if it is none."""
    if prim.name != "compute" or prim.expr is None or len(prim.signature.dims[0] or ()) != 2:
        return None
    i, j = prim.signature.dims[0]
    found = _normalize(prim.expr, i, j) or _scale(prim.expr, i, j)
    if found is None:
        return None
    form, roles = found
    roles["Y"] = prim.args[0]
    return PrimCall(form, tuple(roles[p] for p in FORMS[form].params), prim.loc, sig=FORMS[form])


def described(names) -> str:
    """The forms ``names`` (an implementation's ``implements``) names, as their meanings."""
    return "; ".join(f"{n}: {FORMS[n].meaning}" for n in names if n in FORMS)


def _load(e, idx: tuple) -> Optional[object]:
    """The parameter ``e`` reads, where it reads it plainly at exactly ``idx``."""
    if isinstance(e, el.Load) and len(e.idx) == len(idx) and all(isinstance(a, str) and a == b for a, b in zip(e.idx, idx)):
        return e.arg
    return None


def _bin(e, op: str):
    return (e.lhs, e.rhs) if isinstance(e, el.Bin) and e.op == op else (None, None)


def _scaled(e, i: str, j: str):
    """``core * s[i] * w[j]``: (core, s, w)."""
    inner, w = _bin(e, "*")
    core, s = _bin(inner, "*")
    s, w = _load(s, (i,)), _load(w, (j,))
    return (core, s, w) if core is not None and s is not None and w is not None else None


def _scale(e, i: str, j: str):
    """``X[i, j] * s[i] * w[j]``."""
    found = _scaled(e, i, j)
    x = _load(found[0], (i, j)) if found else None
    return ("row_scale", {"X": x, "s": found[1], "w": found[2]}) if x is not None else None


def _normalize(e, i: str, j: str):
    """``(X[i, j] - c[i]) * s[i] * w[j] + b[j]``."""
    scaled, b = _bin(e, "+")
    b = _load(b, (j,))
    found = _scaled(scaled, i, j) if b is not None else None
    centred, c = _bin(found[0], "-") if found else (None, None)
    x, c = _load(centred, (i, j)), _load(c, (i,))
    if x is None or c is None:
        return None
    return "row_normalize", {"X": x, "c": c, "s": found[1], "w": found[2], "b": b}
