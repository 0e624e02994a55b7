"""``torch.ops.septran.gemm``: act(x @ op(w) + bias) over x's last dimension, x of any leading dimensions.

``w`` is (K, N), or (N, K) with ``w_transposed`` (a Linear's weight, read in place by the ``gemm_bt`` leaf).
The leading dimensions of ``x`` fold into the rows M, which the model mappings keep dynamic: one build serves
every batch and sequence length. Without bias and activation it is the library's gemm logic (B as stored); else
its gemm_epilogue logic with a zero bias where there is none (``septran/ops/logic/``).
"""
from __future__ import annotations

from typing import Optional

import torch

from septran.ops import kernels

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


ROWS = (("A", (0,)),)  # M: a model's batch x sequence length, any size: one build


def gemm_kernel(target: str, act: str, w_transposed: bool, plain: bool):
    """The compiled kernel for one activation and layout (``plain``: the gemm logic, no epilogue)."""
    if plain:
        return kernels.kernel(("gemm", target, "plain", False), target, "gemm", lambda: kernels.logic("gemm"), ROWS)
    # no activation: the logic launches no epi_act_leaf, so the mapping binds none
    unbound = ("epi_act_leaf",) if act == "none" else ()
    return kernels.kernel(("gemm_epilogue", target, act, w_transposed), target, "gemm_epilogue",
                          lambda: kernels.logic("gemm_epilogue").gemm_epilogue(act, False, w_transposed), ROWS, unbound)


def _check_act(act: str) -> None:
    if act not in ACTIVATIONS:
        from septran.errors import CallError

        raise CallError(f"septran::gemm has no activation {act!r}", hint="one of: " + ", ".join(ACTIVATIONS))


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


@torch.library.custom_op("septran::gemm", mutates_args=())
def gemm(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], w_transposed: bool, act: str) -> torch.Tensor:
    _check_act(act)
    k = x.shape[-1]
    n = w.shape[0] if w_transposed else w.shape[1]
    a = _dense(x).reshape(-1, k)
    plain = bias is None and act == "none" and not w_transposed
    if bias is None and not plain:
        bias = torch.zeros(n, dtype=x.dtype, device=x.device)
    kernel = gemm_kernel(kernels.target_for(x.device), act, w_transposed, plain)
    out = kernel(a, _dense(w)) if plain else kernel(a, _dense(w), _dense(bias))
    return out.reshape(*x.shape[:-1], n)


@gemm.register_fake
def _(x, w, bias, w_transposed, act):
    _check_act(act)
    n = w.shape[0] if w_transposed else w.shape[1]
    return x.new_empty(*x.shape[:-1], n)


def reference(x, w, bias, w_transposed, act):
    """What the op computes, in torch (tests)."""
    y = x @ (w.t() if w_transposed else w)
    if bias is not None:
        y = y + bias
    fns = {"none": lambda t: t, "relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
           "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}
    return fns[act](y)
