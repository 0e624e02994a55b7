"""The residual add in the GEMM's epilogue: ``r + linear(x)`` (either order) -> ``septran.gemm_residual``.

Asked at the ``add`` (before the GEMM's own node is reached: the rewrite walks last to first), it reads the
GEMM with the GEMM pattern (``patterns.gemm``: mm / addmm / linear, the views that fold x's leading dimensions,
a weight read transposed in place) and takes it only without an activation, when the GEMM's result has no
other use, and when the other operand has the sum's shape and dtype (no broadcast: it is read tile for tile).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from septran.model.flops import node_flops
from septran.model.patterns.base import Match, Pattern, val
from septran.model.patterns.gemm import GemmPattern
from septran.model.patterns.nodes import aten, is_call, same_shape


def _contiguous(v) -> bool:
    """Row-major strides, compared as expressions (asking a symbolic size would add a guard)."""
    step = 1
    for size, stride in reversed(list(zip(v.shape, v.stride()))):
        if str(size) != "1" and str(stride) != str(step):
            return False
        step = size * step
    return True


class GemmResidual(Pattern):
    name = "gemm_residual"

    def __init__(self):
        self._gemm = GemmPattern()

    def match(self, node: fx.Node):
        if not is_call(node, aten.add.Tensor) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
            return None
        out = val(node)
        if not isinstance(out, torch.Tensor) or not _contiguous(out):
            return None
        for prod, res in (node.args, node.args[::-1]):
            if not isinstance(prod, fx.Node) or not isinstance(res, fx.Node) or len(prod.users) != 1:
                continue
            rv = val(res)
            if not isinstance(rv, torch.Tensor) or rv.dtype != out.dtype or not same_shape(rv.shape, out.shape):
                continue
            m = self._gemm.match(prod)
            if not isinstance(m, Match) or m.output is not prod:
                continue
            x, w, bias, trans, act = m.args
            if act != "none" or res in m.nodes:
                continue
            import septran.ops.gemm_residual as op  # registers torch.ops.septran.gemm_residual
            from septran.errors import SepTranError
            from septran.ops import kernels

            try:
                if not op.checked_on(kernels.target_for(out.device)):
                    return None
            except SepTranError:  # no SepTran target for this device: the GEMM pattern says why
                return None
            from septran.model import steps_fused

            steps_fused.register()
            kernel = "examples/gemm_epilogue (" + ", ".join(
                (["bias"] if bias is not None else []) + ["residual"] + (["W^T in place"] if trans else [])) + ")"
            return Match(self.name, (*m.nodes, node), node, torch.ops.septran.gemm_residual.default,
                         (x, w, bias, res, trans), kernel=kernel, flops=m.flops + node_flops(node))
        return None
