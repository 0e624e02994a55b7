"""Interval arithmetic over the program's integer expressions: what the verification proves with.

Every loop variable ranges over ``0 .. extent - 1`` and every constant is a
number once a call fixes the shapes and the mapping the tunables, so the
smallest and largest value of an index is a pair of integers. The bounds are
exact for the expressions Task Lang builds (sums, products by constants,
floor division by positive constants, min and max of monotone terms), and
safe (never too narrow) for the rest.
"""
from __future__ import annotations

from typing import Mapping

from septran.expr import BinOp, Const, Expr, Sym, Var


class Unbounded(Exception):
    """An expression whose range cannot be bounded (a division by a range that holds 0)."""


Interval = tuple[int, int]


def bounds(e: Expr, env: Mapping[Sym, Interval]) -> Interval:
    """The smallest and largest value of ``e`` when each variable ranges over ``env``."""
    if isinstance(e, Const):
        return e.value, e.value
    if isinstance(e, Var):
        if e.sym not in env:
            raise Unbounded(f"{e.sym.name} has no known range")
        return env[e.sym]
    if not isinstance(e, BinOp):
        raise Unbounded(f"{e} is not an integer of the program")
    (a, b), (c, d) = bounds(e.lhs, env), bounds(e.rhs, env)
    if e.op == "+":
        return a + c, b + d
    if e.op == "-":
        return a - d, b - c
    if e.op == "*":
        xs = (a * c, a * d, b * c, b * d)
        return min(xs), max(xs)
    if e.op in ("//", "ceildiv"):
        if c <= 0 <= d:
            raise Unbounded(f"{e.rhs} {'is' if c == d else 'may be'} 0 in {e}")
        div = (lambda x, y: x // y) if e.op == "//" else (lambda x, y: -(-x // y))
        xs = (div(a, c), div(a, d), div(b, c), div(b, d))
        return min(xs), max(xs)
    if e.op == "%":  # floor modulo by a positive divisor: 0 .. divisor - 1, or the dividend where it is smaller
        if c <= 0:
            raise Unbounded(f"{e.rhs} may be 0 or negative in {e}")
        return (a, b) if 0 <= a and b < c else (0, d - 1)
    if e.op == "min":
        return min(a, c), min(b, d)
    if e.op == "max":
        return max(a, c), max(b, d)
    raise Unbounded(f"unknown operation {e.op}")


def witness(e: Expr, env: Mapping[Sym, Interval], target: int) -> dict[str, int]:
    """Loop values at which ``e`` reaches ``target``, for the message (each variable at an end of its range)."""
    free = [s for s in env if _mentions(e, s)]
    best: dict[str, int] = {}
    for s in free:
        lo, hi = env[s]
        for v in (hi, lo):
            trial = dict(env)
            trial[s] = (v, v)
            try:
                got = bounds(e, trial)
            except Unbounded:
                continue
            if got[0] <= target <= got[1]:
                best[s.name] = v
                env = trial
                break
    return best


def _mentions(e: Expr, s: Sym) -> bool:
    if isinstance(e, Var):
        return e.sym is s
    if isinstance(e, BinOp):
        return _mentions(e.lhs, s) or _mentions(e.rhs, s)
    return False
