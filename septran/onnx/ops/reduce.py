"""Reductions: ReduceMax/Min/Sum/Mean/SumSquare/L2 over ``axes`` (an attribute before opset 13 for ReduceSum and
18 for the others, an input after), ``keepdims``, ``noop_with_empty_axes``."""
from __future__ import annotations

import torch

from septran.onnx.ops.registry import op
from septran.onnx.ops.shape import _axes


def _amax(x, dims, keep):
    return torch.amax(x, dims, keep) if x.numel() else torch.full(_reduced(x.shape, dims, keep), float("-inf"), dtype=x.dtype, device=x.device)


def _amin(x, dims, keep):
    return torch.amin(x, dims, keep) if x.numel() else torch.full(_reduced(x.shape, dims, keep), float("inf"), dtype=x.dtype, device=x.device)


def _reduced(shape, dims, keep):
    return tuple(1 if i in dims else s for i, s in enumerate(shape) if keep or i not in dims)


def _sum_square(x, dims, keep):
    return torch.sum(x * x, dims, keep)


def _l2(x, dims, keep):
    return torch.sqrt(torch.sum(x * x, dims, keep))


def _mean(x, dims, keep):
    return torch.mean(x, dims, keep)


def _sum(x, dims, keep):
    return torch.sum(x, dims, keep)


FNS = {"ReduceMax": _amax, "ReduceMin": _amin, "ReduceSum": _sum, "ReduceMean": _mean,
       "ReduceSumSquare": _sum_square, "ReduceL2": _l2}


@op(*FNS)
def reduce(b, n):
    rank = len(n.shape(0))
    axes = _axes(n, 1)
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return [n.input(0)]
        axes = list(range(rank))
    dims = tuple(sorted(a % rank for a in axes)) if rank else ()
    keep = bool(n.attr("keepdims", 1))
    if not rank:
        return [n.input(0)]
    return [n.call(FNS[n.op_type], n.input(0), dims, keep)]
