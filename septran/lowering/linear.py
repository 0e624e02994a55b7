"""Offsets as linear forms: ``2 * k * BN + 64`` -> ({k: 2 * BN}, 64) once the constants are numbers.

Two views of one tensor relate by the difference of their offsets; where that
difference is a number (or a known range) the lowering can tell whether one
view lies inside the other, overlaps it, or is disjoint from it.
"""
from __future__ import annotations

from typing import Mapping

from septran.expr import BinOp, Const, Expr, Sym, Var, evaluate

Linear = tuple[dict, int]  # {atom: coefficient}, constant; atoms are Syms or non-linear sub-expressions


def linear(e: Expr, values: Mapping[Sym, int]) -> Linear:
    if isinstance(e, Const):
        return {}, e.value
    if isinstance(e, Var):
        if e.sym in values:
            return {}, values[e.sym]
        return {e.sym: 1}, 0
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        (a, c), (b, d) = linear(e.lhs, values), linear(e.rhs, values)
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v}, c + sign * d
    if isinstance(e, BinOp) and e.op == "*":
        (a, c), (b, d) = linear(e.lhs, values), linear(e.rhs, values)
        if not a:
            return {k: v * c for k, v in b.items() if v * c}, c * d
        if not b:
            return {k: v * d for k, v in a.items() if v * d}, c * d
    if isinstance(e, BinOp):
        (a, c), (b, d) = linear(e.lhs, values), linear(e.rhs, values)
        if not a and not b:  # // ceildiv min max of two numbers
            return {}, evaluate(BinOp(e.op, Const(c), Const(d)), {})
    return {e: 1}, 0  # a non-linear term (h // g): an atom of its own


def difference(a: Expr, b: Expr, values: Mapping[Sym, int]) -> Linear:
    """``a - b`` as a linear form."""
    return linear(BinOp("-", a, b), values)


def as_expr(form: Linear) -> Expr:
    """A linear form back as an expression (atoms in a stable order)."""
    terms, const = form
    out: Expr = Const(const)
    for atom, coeff in sorted(terms.items(), key=lambda kv: str(kv[0])):
        term = Var(atom) if isinstance(atom, Sym) else atom
        term = term if coeff == 1 else BinOp("*", term, Const(coeff))
        out = term if out == Const(0) else BinOp("+", out, term)
    return out
