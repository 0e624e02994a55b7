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


def c_expr(e, symbols: dict) -> str:
    """``e`` (sympy or int) as int64 C, ``symbols`` mapping each sympy symbol to its index in ``S``."""
    if isinstance(e, int):
        return f"INT64_C({e})"
    if isinstance(e, sympy.Integer):
        return f"INT64_C({int(e)})"
    if isinstance(e, sympy.Symbol):
        if e not in symbols:
            raise Unsupported(f"the size {e} comes from no input of the segment")
        return f"S[{symbols[e]}]"
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(c_expr(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(c_expr(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and int(e.exp) >= 0:
        return "(" + " * ".join([c_expr(e.base, symbols)] * int(e.exp) or ["INT64_C(1)"]) + ")"
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv") and len(e.args) == 2:
        a, b = (c_expr(x, symbols) for x in e.args)
        return f"st_floordiv({a}, {b})"
    if name in ("Mod", "PythonMod") and len(e.args) == 2:
        a, b = (c_expr(x, symbols) for x in e.args)
        return f"st_mod({a}, {b})"
    if name in ("Max", "Min"):
        fn = "st_max" if name == "Max" else "st_min"
        out = c_expr(e.args[0], symbols)
        for x in e.args[1:]:
            out = f"{fn}({out}, {c_expr(x, symbols)})"
        return out
    raise Unsupported(f"the size expression {e} ({name})")


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
    if isinstance(e, int):
        return str(e)
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        if e not in symbols:
            raise Unsupported(f"the size {e} comes from no input of the segment")
        return f"S[{symbols[e]}]"
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(py_expr(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(py_expr(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and int(e.exp) >= 0:
        return f"({py_expr(e.base, symbols)} ** {int(e.exp)})"
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv") and len(e.args) == 2:
        return f"({py_expr(e.args[0], symbols)} // {py_expr(e.args[1], symbols)})"
    if name in ("Mod", "PythonMod") and len(e.args) == 2:
        return f"({py_expr(e.args[0], symbols)} % {py_expr(e.args[1], symbols)})"
    if name in ("Max", "Min"):
        return f"{name.lower()}({', '.join(py_expr(a, symbols) for a in e.args)})"
    raise Unsupported(f"the size expression {e} ({name})")


def compiled(exprs: list, symbols: dict):
    """A Python function of ``S`` giving the tuple of ``exprs``' values."""
    body = ", ".join(py_expr(e, symbols) for e in exprs)
    return eval(f"lambda S: ({body}{',' if len(exprs) == 1 else ''})", {"max": max, "min": min})  # noqa: S307
