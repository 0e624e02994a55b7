"""``torch.ops.septran.rope``: Llama's ``x * cos + rotate_half(x) * sin`` as ``examples/rope``.

x is (B, H, S, D) as Llama and HF write it; cos and sin broadcast to (B or 1, 1, S, D). The shipped logic
takes X as (batch, seq, heads, D) and the tables as (seq, D): both of x's usual layouts are read in place,
(B, S, H, D) in memory (a transpose of the projection's view) as X itself, a contiguous (B, H, S, D) as
(B * H, S, 1, D) (the heads as a batch of one head each). Tables that differ per batch (positions per
sequence) run one kernel call per batch. The sequence length is a dynamic dimension: one build serves
every length.
"""
from __future__ import annotations

import torch

from septran.model import kernels
from septran.model.ops import shipped
from septran.model.ops.heads import empty_heads, in_layout

DYNAMIC = (("X", (1,)), ("C", (0,)), ("S", (0,)))  # the sequence length


def rope_kernel(target: str):
    def make():
        import septran

        logic = shipped.example("rope").rope_logic
        return septran.compile(logic, mapping=shipped.mapping(target, "rope", DYNAMIC), target=target)

    return kernels.kernel(("rope", target), make)


def _tables(t: torch.Tensor, s: int, d: int) -> torch.Tensor:
    """cos or sin as (B or 1, S, D): the heads dimension (extent 1) dropped, S and D expanded."""
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t[:, 0].expand(t.shape[0], s, d)


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
    out = empty_heads(x.shape, x.dtype, x.device, x_seq_major)
    per_batch = cos.shape[0] > 1 or sin.shape[0] > 1
    for i in range(b if per_batch else 1):
        rows = slice(i, i + 1) if per_batch else slice(0, b)
        c, sn = cos[i if cos.shape[0] > 1 else 0].contiguous(), sin[i if sin.shape[0] > 1 else 0].contiguous()
        if x_seq_major:  # X (B, S, H, D) as it lies
            xs, ys = x[rows].transpose(1, 2), out[rows].transpose(1, 2)
        else:  # (B * H, S, 1, D): each head a sequence of its own
            n = rows.stop - rows.start
            xs, ys = x[rows].reshape(n * h, s, 1, d), out[rows].reshape(n * h, s, 1, d)
        kernel(xs, c, sn, Y=ys)
    return in_layout(out, seq_major)


@rope.register_fake
def _(x, cos, sin, seq_major):
    return empty_heads(x.shape, x.dtype, x.device, seq_major)
