"""``torch.ops.septran.elementwise``: a fused chain of elementwise ops as one generated SepTran kernel.

The chain travels as ``spec``, JSON of the ops (``logic/elementwise_chain``'s format), checked against the op table
before anything is generated. The output is the inputs' broadcast shape, viewed as (rows, last dimension); each
input is viewed as its kind says. Kernels are cached by the chain's structure and its inputs' kinds; dtypes
are the kernel's variants, and the mapping's rows and columns are dynamic, so every size shares one build.
"""
from __future__ import annotations

import json
import math
from typing import List

import torch

from septran.ops import kernels
from septran.ops.logic.elementwise_chain import chain_logic, check, kind_of


def parse(spec: str) -> tuple:
    """The ops of ``spec`` as nested tuples (hashable: the cache key), or ValueError."""
    data = json.loads(spec)
    if not isinstance(data, list):
        raise ValueError("an elementwise chain's spec is a list of ops")
    return tuple((str(op[0]), *((str(t), x) for t, x in op[1:])) for op in data)


def spec_of(ops) -> str:
    return json.dumps([[name, *[[t, x] for t, x in operands]] for name, *operands in ops])


def _view(x: torch.Tensor, kind: str, rows: int, cols: int, device) -> torch.Tensor:
    if kind == "full":
        return x.contiguous().view(rows, cols)
    if kind == "col":
        return x.reshape(cols).contiguous()
    if kind == "row":
        return x.reshape(rows).contiguous()
    return x.reshape(1).to(device).contiguous()  # a 0-d tensor may live on the host beside device tensors


def _device(inputs):
    """The output's device: a device tensor's, where a host 0-d scalar sits beside them (torch allows that)."""
    return next((x.device for x in inputs if x.dim() > 0), inputs[0].device)


@torch.library.custom_op("septran::elementwise", mutates_args=())
def elementwise(inputs: List[torch.Tensor], spec: str, out_dtype: torch.dtype) -> torch.Tensor:
    """The chain ``spec`` over ``inputs`` (broadcast to their common shape), stored in ``out_dtype``."""
    ops = parse(spec)
    shape = torch.broadcast_shapes(*(x.shape for x in inputs))
    kinds = tuple(kind_of(x.shape, shape) for x in inputs)
    if None in kinds:
        raise ValueError(f"an input of an elementwise chain broadcasts to {tuple(shape)} other than along leading "
                         "dimensions or as one value per row")
    check(ops, kinds)
    y = torch.empty(shape, dtype=out_dtype, device=_device(inputs))
    if y.numel() == 0:
        return y
    cols = shape[-1] if len(shape) else 1
    rows = math.prod(shape) // cols
    target = kernels.target_for(y.device)
    k = kernels.kernel(("elementwise_chain", target, ops, kinds), target, "elementwise_chain",
                       lambda: chain_logic(ops, kinds))
    k(*(_view(x, kd, rows, cols, y.device) for x, kd in zip(inputs, kinds)), Y=y.view(rows, cols))
    return y


@elementwise.register_fake
def _(inputs, spec, out_dtype):
    shape = torch.broadcast_shapes(*(x.shape for x in inputs))
    return torch.empty(shape, dtype=out_dtype, device=_device(inputs))
