"""``torch.ops.septran.bmm``: C[b] = A[b] @ B[b] (examples/bmm), the batch and both sequence sides dynamic."""
from __future__ import annotations

import torch

from septran.model import kernels
from septran.model.ops.shipped import example, mapping_file


def bmm_kernel(target: str):
    import septran

    return kernels.kernel(("bmm", target), lambda: septran.compile(example("bmm"), mapping_file(target, "bmm_model", "bmm")))


@torch.library.custom_op("septran::bmm", mutates_args=())
def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return bmm_kernel(kernels.target_for(a.device))(a.contiguous(), b.contiguous())


@bmm.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], a.shape[1], b.shape[2])
