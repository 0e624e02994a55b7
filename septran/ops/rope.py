"""``torch.ops.septran.rope``: Llama's ``x * cos + rotate_half(x) * sin`` as the library's RoPE
(``septran/ops/logic/rope.py``).

x is (B, H, S, D) as Llama and HF write it; cos and sin broadcast to (B or 1, 1, S, D). The shipped logic
takes X as (batch, seq, heads, D) and the tables as (seq, D): both of x's usual layouts are read in place,
(B, S, H, D) in memory (a transpose of the projection's view) as X itself, a contiguous (B, H, S, D) as
(B * H, S, 1, D) (the heads as a batch of one head each). Tables that differ per batch (positions per
sequence) run one kernel call per batch. The sequence length is a dynamic dimension: one build serves
every length.
"""
from __future__ import annotations

import torch

from septran.ops import kernels
from septran.ops.heads import empty_heads, in_layout

DYNAMIC = (("X", (1,)), ("C", (0,)), ("S", (0,)))  # the sequence length


def rope_kernel(target: str):
    return kernels.kernel(("rope", target), target, "rope", lambda: kernels.logic("rope").rope_logic, DYNAMIC)


def _tables(t: torch.Tensor, s: int, d: int) -> torch.Tensor:
    """cos or sin as (B or 1, S, D): the heads dimension (extent 1) dropped, S and D expanded."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t[:, 0].expand(t.shape[0], s, d)


def _as_logic(t: torch.Tensor, seq_major: bool) -> torch.Tensor:
    """(B, H, S, D) as the logic's X, a view: (B, S, H, D) as it lies, or (B * H, S, 1, D) (a head per batch)."""
    b, h, s, d = t.shape
    return t.transpose(1, 2) if seq_major else t.reshape(b * h, s, 1, d)


@torch.library.custom_op("septran::rope", mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seq_major: bool) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])."""
    b, h, s, d = x.shape
    if x.numel() == 0:
        return empty_heads(x.shape, x.dtype, x.device, seq_major)
    cos, sin = _tables(cos, s, d), _tables(sin, s, d)
    kernel = rope_kernel(kernels.target_for(x.device))
    x_seq_major = x.transpose(1, 2).is_contiguous()
    if not x_seq_major:
        x = x.contiguous()
    if cos.shape[0] == 1 and sin.shape[0] == 1:  # one table for every batch: one call (its output allocated)
        y = kernel(_as_logic(x, x_seq_major), cos[0].contiguous(), sin[0].contiguous())
        return in_layout(y.transpose(1, 2) if x_seq_major else y.view(b, h, s, d), seq_major)
    out = empty_heads(x.shape, x.dtype, x.device, x_seq_major)
    for i in range(b):  # a table per batch (positions per sequence): a call per batch, into its rows
        c, sn = cos[i if cos.shape[0] > 1 else 0].contiguous(), sin[i if sin.shape[0] > 1 else 0].contiguous()
        kernel(_as_logic(x[i:i + 1], x_seq_major), c, sn, Y=_as_logic(out[i:i + 1], x_seq_major))
    return in_layout(out, seq_major)


@rope.register_fake
def _(x, cos, sin, seq_major):
    return empty_heads(x.shape, x.dtype, x.device, seq_major)
