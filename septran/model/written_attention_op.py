"""``torch.ops.septran.attention_written``: attention written out with a bool mask known only at run time.

    softmax((q @ k^T) * scale, masked to -inf where keep is False) @ v

as GPT-2 and nanoGPT write it, their causal mask a registered buffer (a graph input: the pattern cannot see its
values). When ``keep`` is the causal mask aligned bottom-right (checked on its content, the answer kept while the
tensor is unchanged: ``septran.model.causal_mask``) and there are no more queries than keys (no row hidden
entirely), it runs SepTran's causal attention (``septran::attention`` with ``lower_right``). Any other mask runs
the written-out computation with torch's operators, in eager's order: eager's answer, NaN rows included.
"""
from __future__ import annotations

import math

import torch

import septran.ops.attention  # noqa: F401  (defines torch.ops.septran.attention)
from septran.model import causal_mask


def causal(q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor) -> bool:
    """The call may run as SepTran's causal attention, aligned bottom-right."""
    sq, sk = q.shape[2], k.shape[2]
    return 0 < sq <= sk and causal_mask.lower_right(keep, sq, sk)


def written(q, k, v, keep, scale: float) -> torch.Tensor:
    """The computation as written: eager torch's answer."""
    att = torch.matmul(q, k.transpose(-2, -1)) * scale
    att = att.masked_fill(~keep, -math.inf)
    return torch.matmul(torch.softmax(att, dim=-1), v)


@torch.library.custom_op("septran::attention_written", mutates_args=())
def attention_written(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """softmax(q k^T * scale, -inf where ``keep`` is False) v, for (B, H, S, D) tensors with the same heads."""
    if causal(q, k, keep):
        return torch.ops.septran.attention.default(q, k, v, None, True, float(scale), False, True)
    return written(q, k, v, keep, scale)


@attention_written.register_fake
def _(q, k, v, keep, scale):
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))
