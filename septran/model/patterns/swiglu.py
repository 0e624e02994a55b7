"""SwiGLU's gate and up projections -> ``septran.swiglu`` (examples/swiglu_mlp).

``silu(x @ Wg^T) * (x @ Wu^T)`` (Llama's ``act_fn(gate_proj(x)) * up_proj(x)``): in the ATen graph
mul(silu(view(mm(view(x), t(Wg)))), view(mm(view(x), t(Wu)))), the product in either order. The pattern
matches at the mul and takes both GEMMs, so it is tried before the plain GEMM pattern; the down projection
that follows stays a GEMM. Projections with a bias (addmm) are left to the GEMM pattern.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.fx as fx

import septran.ops.swiglu  # noqa: F401  (defines torch.ops.septran.swiglu)
from septran.model.patterns.base import Match, Pattern, Refusal, Result, val
from septran.model.patterns.nodes import aten, device_problem, float_dtype_problem, is_call, num, same, same_shape

VIEWS = (aten.view, aten._unsafe_view, aten.reshape)


def _flattened(node) -> tuple[fx.Node, list]:
    """x for ``view(x, (-1, K))`` (x's leading dimensions flattened), else the node itself."""
    if is_call(node, *VIEWS) and val(node.args[0]) is not None and val(node) is not None:
        x, v = val(node.args[0]), val(node)
        if x.dim() >= 2 and v.dim() == 2 and same(x.shape[-1], v.shape[1]):
            return node.args[0], [node]
    return node, []


def _projection(node) -> Optional[tuple[fx.Node, fx.Node, bool, list]]:
    """``(x, w, transposed, nodes)`` when ``node`` is x @ w^T (w (N, K), ``transposed``) or x @ w (w (K, N))."""
    nodes = []
    if is_call(node, *VIEWS):  # the product's rows back to x's leading dimensions
        nodes.append(node)
        node = node.args[0]
    if not is_call(node, aten.mm):
        return None
    nodes.append(node)
    x, nodes_x = _flattened(node.args[0])
    w = node.args[1]
    transposed = False
    if is_call(w, aten.t) or (is_call(w, aten.permute) and list(w.args[1]) == [1, 0]) or (
            is_call(w, aten.transpose) and sorted(a % 2 for a in w.args[1:3]) == [0, 1]):
        nodes.append(w)
        w, transposed = w.args[0], True
    if not isinstance(w, fx.Node) or val(w) is None or val(w).dim() != 2 or val(x) is None:
        return None
    return x, w, transposed, nodes + nodes_x


class SwiGLU(Pattern):
    name = "swiglu"

    def match(self, node: fx.Node) -> Result:
        if not is_call(node, aten.mul) or len(node.args) != 2:
            return None
        for act, up in (node.args, node.args[::-1]):
            if not is_call(act, aten.silu):
                continue
            gate, upp = _projection(act.args[0]), _projection(up)
            if gate is None or upp is None:
                continue
            (x, wg, tg, gate_nodes), (xu, wu, tu, up_nodes) = gate, upp
            if x is not xu or tg != tu:
                continue
            return self._match(node, x, wg, wu, tg, [node, act, *gate_nodes, *up_nodes])
        return None

    def _match(self, node, x, wg, wu, transposed, nodes) -> Result:
        xv, gv, uv, out = val(x), val(wg), val(wu), val(node)
        k_at, n_at = (1, 0) if transposed else (0, 1)
        if out is None or not (same_shape(gv.shape, uv.shape) and same(gv.shape[k_at], xv.shape[-1])):
            return None
        if not same_shape(out.shape, (*xv.shape[:-1], gv.shape[n_at])):
            return None
        why = float_dtype_problem(x, wg, wu, node) or device_problem(x, wg, wu)
        if why:
            return Refusal(self.name, node, why)
        if not out.is_contiguous():
            return Refusal(self.name, node, f"the product has strides {tuple(out.stride())}; "
                                            "SepTran's op writes it contiguous")
        m = 1
        for s in xv.shape[:-1]:
            m *= num(s)
        k, n = num(xv.shape[-1]), num(gv.shape[n_at])
        return Match(pattern=self.name, nodes=tuple(nodes), output=node, op=torch.ops.septran.swiglu.default,
                     args=(x, wg, wu, transposed),
                     kernel="examples/swiglu_mlp" + (" (weights (N, K))" if transposed else ""),
                     flops=4 * m * k * n + 2 * m * n)
