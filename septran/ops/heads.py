"""The two memory layouts of a (B, H, S, D) heads tensor that the model level's ops produce.

Contiguous, or sequence-major: laid out as (B, S, H, D) and viewed as (B, H, S, D) (``transpose(1, 2)`` of a
contiguous tensor, how attention blocks split heads). An op returns the layout the replaced node had, so that
the graph's later views (``transpose(1, 2).reshape(...)``) stay valid.
"""
from __future__ import annotations

import torch


def empty_heads(shape, dtype, device, seq_major: bool) -> torch.Tensor:
    b, h, s, d = shape
    if seq_major:
        return torch.empty(b, s, h, d, dtype=dtype, device=device).transpose(1, 2)
    return torch.empty(b, h, s, d, dtype=dtype, device=device)


def in_layout(t: torch.Tensor, seq_major: bool) -> torch.Tensor:
    """``t`` (B, H, S, D) in the given layout: itself when it already lies so, else a copy."""
    if _is_seq_major(t) if seq_major else t.is_contiguous():
        return t
    out = empty_heads(t.shape, t.dtype, t.device, seq_major)
    out.copy_(t)
    return out


def _is_seq_major(t: torch.Tensor) -> bool:
    return t.transpose(1, 2).is_contiguous()
