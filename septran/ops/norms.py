"""Custom ops of the norms: softmax / log-softmax, LayerNorm and RMSNorm on the shipped logic files.

Each op folds the dimensions before the normalised ones into rows (views, no copy for a contiguous tensor), so
the shipped 2-D logic serves any rank; a softmax over an inner dimension is a 3-D (outer, n, inner) softmax over
axis 1. The mappings make the rows (and the outer dimension) dynamic: one build serves every batch and sequence
length. Weights a model does not have (LayerNorm without affine, RMSNorm without weight) are ones and zeros.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from septran.ops import kernels

_ROWS = (("X", (0,)),)  # the folded rows: any count, one build


def _kernel(op: str, device, variant: tuple, logic_fn, dynamic=_ROWS):
    target = kernels.target_for(device)
    return kernels.kernel((op, target, variant, "rows dynamic"), target, op, logic_fn, dynamic)


_CONSTANTS: dict = {}


def _constant(value: float, n: int, like: torch.Tensor) -> torch.Tensor:
    """A vector of ``n`` copies of ``value`` (a weight the model does not have), made once per device and dtype."""
    key = (value, n, like.dtype, like.device)
    t = _CONSTANTS.get(key)
    if t is None:
        t = _CONSTANTS[key] = torch.full((n,), value, dtype=like.dtype, device=like.device)
    return t


# ---- softmax / log-softmax -------------------------------------------------------------------------------------

@torch.library.custom_op("septran::softmax", mutates_args=())
def softmax(x: torch.Tensor, dim: int, log: bool, out_dtype: torch.dtype) -> torch.Tensor:
    """``torch._softmax`` / ``_log_softmax`` over ``dim``, the result in ``out_dtype``."""
    dim = dim % max(x.dim(), 1)
    shape = x.shape
    n = shape[dim] if x.dim() else 1
    outer = math.prod(shape[:dim])
    inner = math.prod(shape[dim + 1:])
    y = torch.empty(shape, dtype=out_dtype, device=x.device)
    if y.numel() == 0:
        return y
    xc = x.contiguous()
    mod = kernels.logic("softmax")
    if inner == 1:
        # Columns dynamic too: attention scores over a KV cache grow by one column at each decode step.
        k = _kernel("softmax", x.device, (bool(log), 2), lambda: mod.softmax(log=bool(log), axis=1, rank=2),
                    dynamic=(("X", (0, 1)),))
        k(xc.view(outer, n), Y=y.view(outer, n))
    else:
        k = _kernel("softmax", x.device, (bool(log), 3), lambda: mod.softmax(log=bool(log), axis=1, rank=3),
                    dynamic=(("X", (0, 2)),))
        k(xc.view(outer, n, inner), Y=y.view(outer, n, inner))
    return y


@softmax.register_fake
def _(x, dim, log, out_dtype):
    return torch.empty_like(x, dtype=out_dtype, memory_format=torch.contiguous_format)


# ---- LayerNorm -------------------------------------------------------------------------------------------------

@torch.library.custom_op("septran::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, n: int, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
               eps: float) -> torch.Tensor:
    """``F.layer_norm`` over the last dimensions, ``n`` elements in all (the normalized shape's product)."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    rows = x.numel() // n
    w = weight.reshape(n) if weight is not None else _constant(1.0, n, x)
    b = bias.reshape(n) if bias is not None else _constant(0.0, n, x)
    k = _kernel("layernorm", x.device, (), lambda: kernels.logic("layernorm").layernorm(axis=1, rank=2))
    k(x.contiguous().view(rows, n), w.contiguous(), b.contiguous(), eps=float(eps), Y=y.view(rows, n))
    return y


@layer_norm.register_fake
def _(x, n, weight, bias, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# ---- RMSNorm ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("septran::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, n: int, weight: Optional[torch.Tensor], eps: float,
             out_dtype: torch.dtype) -> torch.Tensor:
    """``x * rsqrt(mean(x^2 over the last dimensions, n elements) + eps) * weight``, computed in float32 and
    stored once in ``out_dtype`` (the decomposed forms' upcasts and downcasts are folded into that store)."""
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    if y.numel() == 0:
        return y
    rows = x.numel() // n
    w = weight.reshape(n) if weight is not None else _constant(1.0, n, x)
    k = _kernel("rmsnorm", x.device, (), lambda: kernels.logic("rmsnorm").rmsnorm(axis=1, rank=2))
    k(x.contiguous().view(rows, n), w.contiguous(), eps=float(eps), Y=y.view(rows, n))
    return y


@rms_norm.register_fake
def _(x, n, weight, eps, out_dtype):
    return torch.empty_like(x, dtype=out_dtype, memory_format=torch.contiguous_format)
