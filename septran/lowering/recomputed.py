"""Part of the stage pass: ``task.recomputable(Y[i, j], value)``, an element read where it holds ``value`` exactly.

A 16-bit row that a softmax walks in tiles stores each tile's exps to Y and scales them in a later walk, reading
them back: rounded to 16 bits and then rounded again, where torch rounds once (the FlashAttention rule's 2x broken:
bfloat16 2 x 265 in 256-wide tiles 7.2e-4 off float64, torch 2.5e-4). A row in one tile keeps its exps in a
float32 buffer between the walks, and reading them is exact. The logic says both ways:
``task.recomputable(Y[ix], task.exp(X[ix] - m[i]))``, and the lowering (``leaf_calls``) reads Y's element where
what it reads holds the value as computed (a float32 or float64 tensor, or a buffer no copy filled from a narrower
one: ``_Stager.holds_exactly``) and computes the value again elsewhere. A staged tile that the leaf reads only so
and writes whole is then not copied in at all (``only_recomputed``).
"""
from __future__ import annotations

from septran.frontend import elementwise as el
from septran.frontend.ir import Param, PrimCall, root_param, walk
from septran.lowering import flat_ir as fl

# Types that hold a value computed in float32 (elem_types.F) unrounded.
_EXACT = ("float32", "float64")


def exact(dtype: str) -> bool:
    """Whether elements of ``dtype`` hold a computed value unrounded."""
    return dtype in _EXACT


def only_recomputed(s: fl.Invoke, k: int) -> bool:
    """Whether leaf ``s`` reads its ``k``-th parameter only as ``task.recomputable``'s stored element, in computes
    that write that parameter (whole: an elementwise loop runs over its output)."""
    if s.binding is None:
        return False
    name, seen = s.callee.params[k].name, False
    for prim, _ in walk(s.callee.body):
        if not isinstance(prim, PrimCall):
            continue
        named = [root_param(a).name for a in prim.args]
        if prim.expr is None:
            if name in named:
                return False
            continue
        loads = [n for n in el.nodes(prim.expr) if isinstance(n, el.Load) and root_param(n.arg).name == name]
        stored = [n.args[0] for n in el.nodes(prim.expr) if isinstance(n, el.Call) and n.fn == "recomputable"
                  and root_param(n.args[0].arg).name == name]
        if len(loads) != len(stored) or (stored and not (isinstance(prim.args[0], Param) and prim.args[0].name == name)):
            return False
        seen = seen or bool(stored)
    return seen
