"""Sizes, strides and offsets (sympy expressions over a graph's dynamic sizes) as C expressions.

A launcher takes the dynamic sizes as ``S[0..]`` (int64) and computes every pointer offset and size argument from
them, so one launcher serves every cache length. Only what torch's shape arithmetic produces for views is taken:
integers, symbols, sums, products, non-negative integer powers, floor division and modulo, min and max. Anything
else is ``Unsupported`` and the segment runs as before (never a guess).
"""
from __future__ import annotations

import sympy


class Unsupported(Exception):
    """A node, a value or an expression the launcher cannot express; the segment falls back to the steps."""


class _Spelling:
    """How one language writes the operations a size expression uses."""

    def __init__(self, integer, power, floordiv, mod, extreme):
        self.integer, self.power, self.floordiv, self.mod, self.extreme = integer, power, floordiv, mod, extreme


_C = _Spelling(integer=lambda n: f"INT64_C({n})",
               power=lambda base, n: "(" + " * ".join([base] * n or ["INT64_C(1)"]) + ")",
               floordiv=lambda a, b: f"st_floordiv({a}, {b})", mod=lambda a, b: f"st_mod({a}, {b})",
               extreme=lambda name, args: _nested(f"st_{name}", args))
_PY = _Spelling(integer=str, power=lambda base, n: f"({base} ** {n})",
                floordiv=lambda a, b: f"({a} // {b})", mod=lambda a, b: f"({a} % {b})",
                extreme=lambda name, args: f"{name}({', '.join(args)})")


def _nested(fn: str, args: list) -> str:
    out = args[0]
    for x in args[1:]:
        out = f"{fn}({out}, {x})"
    return out


def _spelled(e, symbols: dict, how: _Spelling) -> str:
    if isinstance(e, (int, sympy.Integer)):
        return how.integer(int(e))
    if isinstance(e, sympy.Symbol):
        if e not in symbols:
            raise Unsupported(f"the size {e} comes from no input of the segment")
        return f"S[{symbols[e]}]"
    if isinstance(e, (sympy.Add, sympy.Mul)):
        op = " + " if isinstance(e, sympy.Add) else " * "
        return "(" + op.join(_spelled(a, symbols, how) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and int(e.exp) >= 0:
        return how.power(_spelled(e.base, symbols, how), int(e.exp))
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv", "Mod", "PythonMod") and len(e.args) == 2:
        a, b = (_spelled(x, symbols, how) for x in e.args)
        return how.floordiv(a, b) if name in ("FloorDiv", "CleanDiv") else how.mod(a, b)
    if name in ("Max", "Min"):
        return how.extreme(name.lower(), [_spelled(a, symbols, how) for a in e.args])
    raise Unsupported(f"the size expression {e} ({name})")


def c_expr(e, symbols: dict) -> str:
    """``e`` (sympy or int) as int64 C, ``symbols`` mapping each sympy symbol to its index in ``S``."""
    return _spelled(e, symbols, _C)


def value(e, sub: dict) -> int:
    """``e`` at the sizes ``sub`` (symbol -> int)."""
    if isinstance(e, int):
        return e
    return int(e.xreplace(sub)) if sub else int(e)


def expr(size):
    """A torch size (an int or a SymInt) as a sympy expression."""
    if isinstance(size, int):
        return sympy.Integer(size)
    return size.node.expr


def py_expr(e, symbols: dict) -> str:
    """``e`` as Python over ``S`` (a tuple of the sizes): a launch evaluates its outputs' layouts without sympy."""
    return _spelled(e, symbols, _PY)


def compiled(exprs: list, symbols: dict):
    """A Python function of ``S`` giving the tuple of ``exprs``' values."""
    body = ", ".join(py_expr(e, symbols) for e in exprs)
    return eval(f"lambda S: ({body}{',' if len(exprs) == 1 else ''})", {"max": max, "min": min})  # noqa: S307
