"""RoPE as Llama and HF write it -> ``septran.rope`` (examples/rope).

    q * cos + rotate_half(q) * sin,   rotate_half(x) = cat((-x[..., D/2:], x[..., :D/2]), dim=-1)

In the ATen graph: add(mul(x, cos), mul(cat([neg(slice(x, -1, D/2)), slice(x, -1, 0, D/2)], -1), sin)), each
product and the sum in either order. The pattern matches at the add; cos and sin may have any shape that
broadcasts to (B or 1, 1, S, D) (Llama's ``cos.unsqueeze(1)``).
"""
from __future__ import annotations

import torch
import torch.fx as fx

import septran.ops.rope  # noqa: F401  (defines torch.ops.septran.rope)
from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import (aten, arguments, device_problem, float_dtype_problem, is_call, numel,
                                          same, same_shape, seq_major)

BIG = 2**62  # a slice's "to the end"


def _operands(node, target):
    """Both orders of a binary call's tensor operands, or () if ``node`` is not that call."""
    if not is_call(node, target) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return ()
    a, b = node.args
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
        return ()
    return ((a, b), (b, a))


def _half_slice(node, first: bool):
    """x if ``node`` is x[..., :D/2] (``first``) or x[..., D/2:] (x 4-d, D even), else None."""
    if not is_call(node, aten.slice) or not isinstance(node.args[0], fx.Node):
        return None
    x = node.args[0]
    xv = val(x)
    if xv is None or xv.dim() != 4 or not same(xv.shape[3] % 2, 0):
        return None
    a = arguments(node)
    d = xv.shape[3]
    half = d // 2
    start, end = a["start"] or 0, a["end"]
    end = d if end is None or (isinstance(end, int) and end >= BIG) else end
    if a["dim"] not in (3, -1) or a["step"] != 1:
        return None
    if not (same(start, 0) and same(end, half) if first else same(start, half) and same(end, d)):
        return None
    return x


def _rotate_half(node):
    """``(x, nodes)`` if ``node`` is rotate_half(x), else None."""
    if not is_call(node, aten.cat) or len(node.args[0]) != 2:
        return None
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim not in (3, -1):
        return None
    neg, low = node.args[0]
    if not is_call(neg, aten.neg):
        return None
    x = _half_slice(neg.args[0], first=False)
    if x is None or _half_slice(low, first=True) is not x:
        return None
    return x, [node, neg, neg.args[0], low]


def _table_problem(t, x) -> str:
    """Why cos or sin does not broadcast to (B or 1, 1, S, D) over x (B, H, S, D), or ""."""
    tv, xv = val(t), val(x)
    if tv is None or tv.dim() > 4:
        return "a cos/sin table of more than 4 dimensions"
    shape = (1,) * (4 - tv.dim()) + tuple(tv.shape)
    if not same(shape[1], 1):
        return "cos/sin tables that differ per head"
    if not (same(shape[0], 1) or same(shape[0], xv.shape[0])):
        return "cos/sin tables whose batch is neither 1 nor x's"
    if not all(same(shape[i], 1) or same(shape[i], xv.shape[i]) for i in (2, 3)):
        return "cos/sin tables that do not broadcast over (S, D)"
    return ""


class Rope(Pattern):
    name = "rope"

    def match(self, node: fx.Node) -> Result:
        for a, b in _operands(node, aten.add):
            for rot, sin in _operands(b, aten.mul):
                found = _rotate_half(rot)
                if found is None:
                    continue
                x, rot_nodes = found
                for xx, cos in _operands(a, aten.mul):
                    if xx is x:
                        return self._match(node, x, cos, sin, [node, a, b, *rot_nodes])
        return None

    def _match(self, node, x, cos, sin, nodes) -> Result:
        xv, out = val(x), val(node)
        if out is None or not same_shape(out.shape, xv.shape):
            return None
        why = float_dtype_problem(x, cos, sin, node) or device_problem(x, cos, sin)
        why = why or _table_problem(cos, x) or _table_problem(sin, x)
        if why:
            return Refusal(self.name, node, why)
        layout = seq_major(out.shape, out.stride())
        if layout is None:
            return Refusal(self.name, node, f"RoPE's output has strides {tuple(out.stride())}: SepTran's op writes "
                                            "(B, H, S, D) contiguous or laid out as (B, S, H, D)")
        n = numel(xv.shape)
        return Match(pattern=self.name, nodes=tuple(nodes), output=node, op=torch.ops.septran.rope.default,
                     args=(x, cos, sin, layout), kernel="examples/rope", flops=3 * n + n // 2)
