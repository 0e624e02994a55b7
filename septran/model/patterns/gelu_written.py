"""GELU's tanh form written out, as Hugging Face's ``NewGELUActivation`` (GPT-2's ``gelu_new``) writes it, made
``aten.gelu(x, approximate="tanh")`` before the patterns run, so that the GEMM before it takes it as its epilogue.

    0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0))))

is torch's own definition of ``gelu(x, approximate="tanh")``. Left as it is, the chain is an elementwise kernel
that reads x five times and calls ``tanhf`` per element (scalar: the tile's guarded loads keep g++ from
vectorising it), about 40 ns an element against a few for the GEMM's epilogue. Only that exact chain is taken:
each constant equal to its value in float32 (0.5, 1, 0.044715, sqrt(2 / pi), the exponent 3), every
intermediate used by the chain alone, a float dtype; ``mul`` and ``add`` with their operands in either order.
"""
from __future__ import annotations

import logging
import math
from typing import Optional

import torch
import torch.fx as fx

from septran.model.patterns.base import val
from septran.model.patterns.nodes import FLOATS, is_call

log = logging.getLogger(__name__)
aten = torch.ops.aten
_MUL = (aten.mul.Tensor, aten.mul.Scalar)
_ADD = (aten.add.Tensor, aten.add.Scalar)


def _const(a, want: float) -> bool:
    """``a`` is the Python number ``want`` (as float32 rounds it: the graph computes in float32 or wider)."""
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        return False
    return float(torch.tensor(a, dtype=torch.float32)) == float(torch.tensor(want, dtype=torch.float32))


def _scaled(node, factor: float) -> Optional[fx.Node]:
    """The tensor ``t`` of ``node = t * factor`` (either order), or None."""
    if not is_call(node, *_MUL) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    if isinstance(a, fx.Node) and _const(b, factor):
        return a
    if isinstance(b, fx.Node) and _const(a, factor):
        return b
    return None


def _plus(node) -> Optional[tuple]:
    """The two operands of ``node = a + b`` (alpha 1), or None."""
    if not is_call(node, *_ADD) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    return node.args


def _only_used_by(node: fx.Node, user: fx.Node) -> bool:
    return isinstance(node, fx.Node) and set(node.users) == {user}


def match(y: fx.Node) -> Optional[tuple[fx.Node, list]]:
    """(x, the chain's nodes) when ``y`` is the written-out GELU of x, else None."""
    if not is_call(y, *_MUL) or len(y.args) != 2 or y.kwargs:
        return None
    for half, rest in (y.args, reversed(y.args)):
        x = _scaled(half, 0.5)
        terms = _plus(rest)
        if x is None or terms is None:
            continue
        t = next((a for a, b in (terms, reversed(terms)) if isinstance(a, fx.Node) and _const(b, 1.0)), None)
        if not is_call(t, aten.tanh.default):
            continue
        inner = _scaled(t.args[0], math.sqrt(2.0 / math.pi))
        s = _plus(inner)
        if s is None:
            continue
        for a, b in (s, reversed(s)):
            cube = _scaled(b, 0.044715)
            if a is not x or not is_call(cube, aten.pow.Tensor_Scalar) or cube.args[0] is not x \
                    or not _const(cube.args[1], 3.0):
                continue
            chain = [y, half, rest, t, t.args[0], inner, b, cube]
            inside = chain[1:]
            users = {half: y, rest: y, t: rest, t.args[0]: t, inner: t.args[0], b: inner, cube: b}
            if not all(_only_used_by(n, users[n]) for n in inside):
                break
            return x, chain
    return None


def canonicalize(graph: fx.Graph) -> int:
    """Each written-out GELU (tanh) becomes one ``aten.gelu(x, approximate="tanh")``; returns how many."""
    done = 0
    for y in reversed(list(graph.nodes)):
        if y.graph is not graph:
            continue
        found = match(y)
        if found is None:
            continue
        x, chain = found
        vx, vy = val(x), val(y)
        if not isinstance(vx, torch.Tensor) or not isinstance(vy, torch.Tensor) or vx.dtype not in FLOATS \
                or vy.dtype != vx.dtype or str(vy.shape) != str(vx.shape):
            continue
        with graph.inserting_before(y):
            gelu = graph.call_function(aten.gelu.default, (x,), {"approximate": "tanh"})
        kept = ("val", "tensor_meta", "stack_trace", "nn_module_stack")
        gelu.meta.update({k: v for k, v in y.meta.items() if k in kept})
        y.replace_all_uses_with(gelu)
        for n in chain:  # users before what they use
            graph.erase_node(n)
        done += 1
    if done:
        log.info("septran: %d written-out GELU (tanh) chain(s) as aten.gelu", done)
    return done
