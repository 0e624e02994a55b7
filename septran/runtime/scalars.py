"""Scalar arguments at call time (``eps``, ``sm_scale``): which numbers a kernel takes, and how a value names its variant.

A scalar is a constant of the generated program, which computes in float32.
Any real number is taken (Python ``int`` and ``float``, NumPy integers and
floats of every width, ``fractions.Fraction``) as long as its float32 value is
finite, or it is itself ±inf or NaN; ``bool`` is refused, and so is a finite
value that float32 cannot hold (``1e300``), with a ``CallError`` naming the
scalar. Two values are the same variant exactly when their ``key`` is equal:
every NaN is one key (``nan != nan`` would otherwise make each call a new
variant), and ``0.0`` and ``-0.0`` are two.
"""
from __future__ import annotations

import math
import numbers
import struct

from septran.errors import CallError

FLOAT32_MAX = 3.4028234663852886e38


def value(name: str, given) -> float:
    """``given`` as the float the program is specialised for, or a CallError naming the scalar."""
    if isinstance(given, bool) or not isinstance(given, numbers.Real) or type(given).__name__ == "bool_":
        hint = f"pass a Python number, e.g. {name}=float(x)"
        if hasattr(given, "item") and getattr(given, "ndim", None) == 0:
            hint = f"pass a Python number: {name}=x.item()"
        raise CallError(f"scalar {name} must be a number, got {type(given).__name__}", hint=hint)
    try:
        out = float(given)
    except (OverflowError, ValueError):  # an int or Fraction beyond float64
        out = math.inf
    if math.isnan(out):
        return math.nan  # one NaN: its sign and payload never reach the program
    if math.isinf(out) and given == out:
        return out  # ±inf itself
    if math.isinf(out) or math.isinf(struct.unpack("f", struct.pack("f", out))[0]):  # rounds past float32's largest
        raise CallError(
            f"scalar {name} = {given!r} is out of float32's range: the program computes in float32, "
            f"which holds |{name}| <= {FLOAT32_MAX:.8g} (and inf, -inf, nan)",
            hint=f"pass a smaller {name}, or float('inf') if infinity is meant",
        )
    return out


def key(v: float) -> str:
    """What tells two values' programs apart: exact (float.hex), and one for every NaN."""
    return "nan" if math.isnan(v) else v.hex()


def text(v: float) -> str:
    """A value as it appears in a variant's tag and in dump file names: shortest exact, nan and ±inf spelled out."""
    return repr(float(v))
