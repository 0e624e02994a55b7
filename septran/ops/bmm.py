"""``torch.ops.septran.bmm``: C[b] = A[b] @ B[b] (``septran/ops/logic/bmm.py``), the batch, both sequence sides
and the depth dynamic (where the target's mapping keeps the depth a number, ``static: {A: [2]}`` as sm80's
does, a build per depth).
"""
from __future__ import annotations

import torch

from septran.ops import kernels

DYNAMIC = (("A", (0, 1, 2)), ("B", (2,)))  # batch x heads, rows, depth; columns


def bmm_kernel(target: str):
    return kernels.kernel(("bmm", target), target, "bmm", lambda: kernels.logic("bmm"), DYNAMIC)


@torch.library.custom_op("septran::bmm", mutates_args=())
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return bmm_kernel(kernels.target_for(a.device))(a.contiguous(), b.contiguous())


@bmm.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], a.shape[1], b.shape[2])
