"""Dynamic dimensions: problem sizes the mapping keeps symbolic (``dynamic: {Q: [2], K: [2]}``).

A dynamic dimension is no number at compile time: its constant is a TileLang
symbolic variable (``T.dynamic``), bound at each call from the tensors, so one
compile serves every size. Every size means every size from 1 to what a
32-bit index reaches (``upper``); the runtime refuses a call outside that
range. Passes that need a number get a ``DynamicValue`` error instead (a
refusal that names the dimension); the verification proves its obligations
for every size with ``at_most`` below.
"""
from __future__ import annotations

import difflib
from typing import Mapping

from septran.errors import LoweringError, MappingError
from septran.expr import BinOp, Const, Expr, Sym, Var, simplify
from septran.lowering.intervals import Unbounded, bounds
from septran.lowering.linear import difference


class DynamicValue(LoweringError, KeyError):
    """A pass needs the number of an expression that depends on a dynamic dimension.

    A KeyError too: code that asks ``value`` whether an expression is a number of the
    program (and treats "no" as "depends on the block") treats it the same way."""

    def __str__(self) -> str:  # KeyError's str would quote the message
        return LoweringError.__str__(self)


def check_dynamic(graph, mapping) -> None:
    """The mapping's ``dynamic`` names entry tensor parameters and axes they have."""
    entry = graph.entry_task
    params = [p.name for p in entry.params]
    for name, axes in mapping.dynamic.items():
        if name not in params:
            close = difflib.get_close_matches(name, params, n=1)
            raise MappingError(f"dynamic names {name!r}, which is not a tensor parameter of the entry task {entry.name}",
                               mapping.dynamic_loc,
                               hint=(f"did you mean {close[0]!r}? " if close else "") + f"its parameters: {', '.join(params)}")
        rank = graph.ranks.get((entry.name, name))
        for axis in axes:
            if rank is not None and axis.value >= rank:
                raise MappingError(f"dynamic.{name} names axis {axis.value}, but {name} has {rank} dimension"
                                   f"{'' if rank == 1 else 's'} (axes 0..{rank - 1})", axis.loc,
                                   hint="name an axis the logic gives the parameter")


def dynamic_members(mapping) -> set:
    """(param, axis) pairs the mapping names."""
    return {(name, a.value) for name, axes in mapping.dynamic.items() for a in axes}


def at_most(a: Expr, b: Expr, values: Mapping[Sym, int], env) -> bool:
    """Whether ``a <= b`` for every value of the variables in ``env`` (dynamic sizes, loop indices, blocks).

    Interval arithmetic forgets that ``k < ceildiv(n, BN)`` and ``ceildiv(n, BN)`` grow together; here a term
    common to both sides cancels first (as linear forms), ``min`` on the left needs one side below ``b``,
    ``max`` on the right one side above ``a``; what is left is bounded by intervals."""
    if a == b:
        return True
    if isinstance(a, BinOp) and a.op == "min" and (at_most(a.lhs, b, values, env) or at_most(a.rhs, b, values, env)):
        return True
    if isinstance(a, BinOp) and a.op == "max" and at_most(a.lhs, b, values, env) and at_most(a.rhs, b, values, env):
        return True
    if isinstance(b, BinOp) and b.op == "max" and (at_most(a, b.lhs, values, env) or at_most(a, b.rhs, values, env)):
        return True
    if isinstance(b, BinOp) and b.op == "min" and at_most(a, b.lhs, values, env) and at_most(a, b.rhs, values, env):
        return True
    terms, const = difference(b, a, values)
    try:
        lo = const
        for atom, coeff in terms.items():
            x, y = bounds(Var(atom) if isinstance(atom, Sym) else atom, env)
            lo += min(coeff * x, coeff * y)
        return lo >= 0
    except Unbounded:
        return False


def upper_index(e: Expr, loops: Mapping[Sym, Expr]) -> Expr:
    """``e`` at the largest value of each loop index that it grows with (``loops``: index -> its trip count);
    indices it does not grow with stay (intervals bound them)."""
    if isinstance(e, Var) and e.sym in loops:
        return simplify(BinOp("-", loops[e.sym], Const(1)))
    if isinstance(e, BinOp) and e.op in ("+", "min", "max"):
        return simplify(BinOp(e.op, upper_index(e.lhs, loops), upper_index(e.rhs, loops)))
    if isinstance(e, BinOp) and e.op == "*" and isinstance(e.rhs, Const) and e.rhs.value >= 0:
        return simplify(BinOp("*", upper_index(e.lhs, loops), e.rhs))
    if isinstance(e, BinOp) and e.op == "*" and isinstance(e.lhs, Const) and e.lhs.value >= 0:
        return simplify(BinOp("*", e.lhs, upper_index(e.rhs, loops)))
    return e
