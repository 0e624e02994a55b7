"""Types of an element expression, and every conversion between them, made explicit.

The rules (the README states them): float16 and bfloat16 elements are computed
in float32; integer elements (int32, int64) stay integers, and so do the
program's own integers (positions, sizes) and Python ``int`` constants, which
take the type of the integer they meet; ``+ - * // %`` of integers are
integers (the wider type), ``/`` and the math functions are float32;
comparisons give bool; an integer meeting a float becomes float32;
``task.cast`` converts explicitly. The stored value is converted to the
output's element type. The emitter prints the ``Cast`` nodes placed here.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from septran.errors import LoweringError, SourceLoc
from septran.frontend import elementwise as el

F = "float32"  # what floating-point elements are computed in
WEAK = "int"  # an integer of the program or a constant: it adopts the type of the integer it meets
INTS = ("int32", "int64")
_INT_RANGE = {"int32": (-2**31, 2**31), "int64": (-2**63, 2**63)}  # [low, high)
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "tanh")


def zero(dtype: str) -> el.Num:
    """0 in ``dtype``: what a read outside its tensor gives."""
    return el.Num(0) if dtype in INTS else el.Num(0, "bool") if dtype == "bool" else el.Num(0.0)


def join(a: str, b: str) -> str:
    """The type two operands are brought to."""
    if F in (a, b) or a not in INTS + (WEAK, "bool") or b not in INTS + (WEAK, "bool"):
        return F
    a, b = ("int32" if t == "bool" else t for t in (a, b))
    if a == WEAK:
        return b
    if b == WEAK:
        return a
    return "int64" if "int64" in (a, b) else "int32"


def convert(x: el.Elem, have: str, want: str, loc: Optional[SourceLoc] = None) -> el.Elem:
    if have == want or want == WEAK:
        return x
    if isinstance(x, el.Num) and have in (WEAK, F):
        if want == F:
            return el.Num(float(x.value))
        if want in INTS and (have == WEAK or float(x.value).is_integer()):
            low, high = _INT_RANGE[want]
            if not low <= int(x.value) < high:  # T.int32(2**40) would wrap, or TileLang refuses it
                raise LoweringError(f"the constant {x.value} meets {want} values but does not fit in {want}", loc,
                                    hint="cast the other operand to a wider type (task.cast(x, \"int64\")), or write the "
                                         "constant as a float")
            return el.Num(int(x.value), want)
    if have == WEAK and want == F and isinstance(x, el.Size):
        return el.AsFloat(x)
    return el.Cast(want, x)


def typed(e: el.Elem, dtype_of: Callable, out_dtype: str, loc: Optional[SourceLoc]) -> el.Elem:
    """``e`` (its loads resolved to buffer elements) with its conversions, converted to ``out_dtype``.

    ``dtype_of(x)``: the element type of a buffer element (``Elt``) or of a parameter (``task.cast(x, X)``).
    """
    value, have = _typed(e, dtype_of, loc)
    return convert(value, have, out_dtype, loc)


def _typed(e: el.Elem, dtype_of, loc) -> tuple[el.Elem, str]:
    if isinstance(e, el.Elt):
        dtype = dtype_of(e.of)
        if dtype in INTS or dtype == "bool":
            return e, dtype
        return (e, F) if dtype == F else (el.Cast(F, e), F)
    if isinstance(e, el.Num):
        if e.dtype is not None:
            return e, e.dtype
        return e, WEAK if isinstance(e.value, int) else F
    if isinstance(e, (el.Size, el.Position)):
        return e, WEAK
    if isinstance(e, el.AsFloat):
        return e, F
    if isinstance(e, el.Cast):
        x, have = _typed(e.operand, dtype_of, loc)
        want = e.dtype if isinstance(e.dtype, str) else dtype_of(e.dtype)
        if want in INTS or want == "bool":
            return convert(x, have, want, loc), want
        if want == F:
            return convert(x, have, F, loc), F
        return el.Cast(F, el.Cast(want, x)), F  # rounded to float16 / bfloat16, then computed in float32
    if isinstance(e, el.Neg):
        x, have = _typed(e.operand, dtype_of, loc)
        if have == "bool":
            x, have = convert(x, have, "int32", loc), "int32"
        return el.Neg(x), have
    if isinstance(e, el.Bin):
        (a, ta), (b, tb) = _typed(e.lhs, dtype_of, loc), _typed(e.rhs, dtype_of, loc)
        if e.op == "/":
            a, b = convert(a, ta, F, loc), convert(b, tb, F, loc)
            if isinstance(b, el.Num) and b.value == 0:
                # x / +-0.0 is x * +-inf exactly in IEEE (+-inf, or NaN for 0 and NaN), as torch gives it; TileLang
                # refuses a division by a constant zero.
                return el.Bin("*", a, el.Num(math.copysign(math.inf, b.value))), F
            return el.Bin("/", a, b), F
        common = join(ta, tb)
        if e.op in ("//", "%") and common == F:
            raise LoweringError(
                f"'{e.op}' takes integers, but one operand is a float ({ta} {e.op} {tb})", loc,
                hint="use '/' for a float division, or task.cast(x, \"int32\") to make an integer")
        out = el.Bin(e.op, convert(a, ta, common, loc), convert(b, tb, common, loc))
        if e.op in ("//", "%") and isinstance(out.rhs, el.Num) and out.rhs.value == 0:
            raise LoweringError(f"integer '{e.op}' by the constant 0 (torch raises ZeroDivisionError)", loc,
                                hint="divide by a nonzero integer, or use '/' for a float division (x / 0 is inf or nan)")
        return out, "bool" if e.op in _COMPARISONS else common
    if isinstance(e, el.Call):
        if e.fn == "recomputable":  # leaf_calls chooses a side before typing; any other path reaching here is a bug
            raise LoweringError("task.recomputable reached the typing of an expression unresolved: only a leaf's "
                                "elementwise compute may use it", loc)
        args = [_typed(a, dtype_of, loc) for a in e.args]
        if e.fn == "where":
            (c, tc), (a, ta), (b, tb) = args
            common = join(ta, tb) if "bool" not in (ta, tb) or ta != tb else "bool"
            chosen = (convert(c, tc, "bool", loc), convert(a, ta, common, loc), convert(b, tb, common, loc))
            return el.Call("where", chosen), common
        if e.fn in _MATH:
            return el.Call(e.fn, tuple(convert(x, t, F, loc) for x, t in args)), F
        common = args[0][1]
        for _, t in args[1:]:
            common = join(common, t)
        if common == "bool":
            common = "int32"
        return el.Call(e.fn, tuple(convert(x, t, common, loc) for x, t in args)), common
    raise LoweringError(f"element expression {type(e).__name__} cannot be typed", loc)  # pragma: no cover
