"""``torch.ops.septran.gemm_residual``: x @ op(w) + bias + residual, the residual added in the GEMM's epilogue.

A transformer's ``h = x + proj(o)`` (Llama's attention output and down projections, GPT-2's too): one kernel,
one pass over the output, instead of a GEMM and an elementwise add that reads the GEMM's result back.
``residual`` has the output's shape (x's leading dimensions, N). It is the gemm_epilogue logic's residual
variant (``septran/ops/logic/gemm_epilogue.py``), on gemm_epilogue's shipped mapping: the bias leaf adds the
residual's tile too, so no binding changes. The rows are dynamic, as ``septran::gemm``'s.
"""
from __future__ import annotations

from typing import Optional

import torch

from septran.ops import kernels
from septran.ops.gemm import ROWS



def checked_on(target: str) -> bool:
    """Whether ``target``'s gemm_epilogue mapping has run the residual variant against torch: its target.yaml lists
    ``gemm_residual`` under ``model_fusions`` (tests/test_model_fusion.py checks each one listed). Elsewhere the
    bias leaf may be bound to a leaf never checked with R, and the model pattern leaves the add to the
    elementwise kernel."""
    from septran.target import load_target

    return "gemm_residual" in load_target(target).model_fusions


def gemm_residual_kernel(target: str, w_transposed: bool):
    return kernels.kernel(("gemm_epilogue", target, "residual", w_transposed), target, "gemm_epilogue",
                          lambda: kernels.logic("gemm_epilogue").gemm_epilogue("none", False, w_transposed,
                                                                                residual=True),
                          ROWS, ("epi_act_leaf",))


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


@torch.library.custom_op("septran::gemm_residual", mutates_args=())
def gemm_residual(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], residual: torch.Tensor,
                  w_transposed: bool) -> torch.Tensor:
    k = x.shape[-1]
    n = w.shape[0] if w_transposed else w.shape[1]
    if x.numel() == 0 or n == 0 or k == 0:  # nothing to multiply: the sum of nothing, plus what is added
        y = residual.clone() if bias is None else residual + bias
        return y.to(x.dtype)
    a = _dense(x).reshape(-1, k)
    if bias is None:
        bias = torch.zeros(n, dtype=x.dtype, device=x.device)
    r = _dense(residual.expand(*x.shape[:-1], n)).reshape(-1, n)
    out = gemm_residual_kernel(kernels.target_for(x.device), w_transposed)(a, _dense(w), _dense(bias), r)
    return out.reshape(*x.shape[:-1], n)


@gemm_residual.register_fake
def _(x, w, bias, residual, w_transposed):
    n = w.shape[0] if w_transposed else w.shape[1]
    return x.new_empty(*x.shape[:-1], n)


def reference(x, w, bias, residual, w_transposed):
    """What the op computes, in torch (tests)."""
    y = x @ (w.t() if w_transposed else w) + residual
    return y if bias is None else y + bias
