"""``torch.ops.septran.swiglu``: ``silu(x @ Wg^T) * (x @ Wu^T)``, the gate and up projections of a SwiGLU MLP
fused (``septran/ops/logic/swiglu_mlp.py``); the down projection stays a GEMM.

x is (..., K), the weights (N, K) as torch.nn.Linear keeps them (``transposed``) or (K, N); they are read in
place. The tokens (x's leading dimensions, flattened) are a dynamic dimension: one build serves every length.
"""
from __future__ import annotations

import torch

from septran.ops import kernels

DYNAMIC = (("X", (0,)),)  # the tokens


def swiglu_kernel(target: str, transposed: bool):
    return kernels.kernel(("swiglu_mlp", target, transposed), target, "swiglu_mlp",
                          lambda: kernels.logic("swiglu_mlp").swiglu_mlp(transpose_b=transposed), DYNAMIC)


@torch.library.custom_op("septran::swiglu", mutates_args=())
def swiglu(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, transposed: bool) -> torch.Tensor:
    k = x.shape[-1]
    n = wg.shape[0] if transposed else wg.shape[1]
    if x.numel() == 0 or n == 0:  # nothing to compute, or sums of nothing: zeros, as torch gives
        return x.new_zeros(*x.shape[:-1], n)
    x2 = x.reshape(-1, k).contiguous()
    kernel = swiglu_kernel(kernels.target_for(x.device), transposed)
    return kernel(x2, wg.contiguous(), wu.contiguous()).view(*x.shape[:-1], n)


@swiglu.register_fake
def _(x, wg, wu, transposed):
    return x.new_empty(*x.shape[:-1], wg.shape[0] if transposed else wg.shape[1])
