"""The compiled graph's RoPE step on a strided x: the Q (or K) heads of a fused QKV projection are a column slice
of its output, contiguous in neither heads layout. The step copies them once into the layout the node returns and
runs its kernel's plan (before, it ran the op's own Python, which copied to (B, H, S, D) and back)."""
from __future__ import annotations

import pytest
import torch

from conftest import assert_flash_rule
from septran import ops
from septran.model import step_table, steps

pytestmark = pytest.mark.build  # runs the rope kernel (one dynamic build, shared with the other rope tests)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("out_seq_major", [True, False])
def test_rope_step_takes_a_column_slice_of_a_fused_projection(out_seq_major):
    b, s, h, kv, d = 1, 5, 3, 1, 8
    gen = torch.Generator().manual_seed(0)
    fused = torch.randn(b, s, (h + 2 * kv) * d, generator=gen)  # Q | K | V columns, as the fused GEMM writes them
    q = fused[..., :h * d].view(b, s, h, d).transpose(1, 2)
    assert not q.is_contiguous() and not q.transpose(1, 2).is_contiguous()
    angles = torch.randn(s, d // 2, generator=gen, dtype=torch.float64)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    ops.load()
    step = step_table.make(torch.ops.septran.rope.default)
    out = step(None, q, cos.float(), sin.float(), out_seq_major)
    assert step.slow_calls == 0
    assert (out.transpose(1, 2) if out_seq_major else out).is_contiguous()
    ref = q.double() * cos + _rotate_half(q.double()) * sin
    assert_flash_rule(out, ref, q * cos.float() + _rotate_half(q) * sin.float())
