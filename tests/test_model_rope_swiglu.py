"""The model level's RoPE and SwiGLU: septran.rope and septran.swiglu against torch, their patterns on the ATen
graphs of Llama-style modules, and one build for every sequence length."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_flash_rule, needs_nvcc
from septran.ops import kernels
from septran.model.patterns import PATTERNS
from septran.model.patterns.base import Match, Refusal
from septran.model.patterns.rope import Rope
from septran.model.patterns.swiglu import SwiGLU
from support.model_graphs import capture, compile_with, matches
from support.model_graphs import count_builds as _count_builds

pytestmark = pytest.mark.build  # every test here captures a graph or runs an op: kernels are built


def _rand(*shape, seed, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, cos, sin):
    """HF Llama's apply_rotary_pos_emb for one tensor: cos and sin (B, S, D), unsqueezed over the heads."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin


def tables(b, s, d, seed=0, dtype=torch.float32):
    """Llama's cos/sin: a (S, D/2) table of angles, repeated twice along D, per batch positions."""
    pos = torch.arange(s, dtype=torch.float64)[None].expand(b, s) + torch.arange(b)[:, None] * 3
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = pos[..., None] * inv
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _heads(b, h, s, d, seq_major, seed, dtype=torch.float32):
    """(B, H, S, D) as Llama makes it (a transpose of (B, S, H, D)) or contiguous."""
    if seq_major:
        return _rand(b, s, h, d, seed=seed, dtype=dtype).transpose(1, 2)
    return _rand(b, h, s, d, seed=seed, dtype=dtype)


@pytest.mark.parametrize("b, h, s, d, seq_major, out_seq_major, dtype", [
    (2, 3, 5, 8, True, True, torch.float32),
    (2, 3, 5, 8, False, False, torch.float32),
    (1, 4, 33, 16, True, False, torch.float32),  # the output in the other layout
    (3, 2, 1, 64, True, True, torch.float32),  # a decode step
    (2, 5, 17, 32, True, True, torch.bfloat16),
    (2, 5, 17, 32, False, False, torch.float16),
])
def test_rope_op_matches_torch(b, h, s, d, seq_major, out_seq_major, dtype):
    x = _heads(b, h, s, d, seq_major, seed=1, dtype=dtype)
    cos, sin = tables(b, s, d, dtype=dtype)
    ref = apply_rotary(x.double(), cos.double(), sin.double())
    out = torch.ops.septran.rope(x, cos.unsqueeze(1), sin.unsqueeze(1), out_seq_major)
    assert (out.transpose(1, 2) if out_seq_major else out).is_contiguous()
    assert_flash_rule(out, ref, apply_rotary(x, cos, sin))
    shared = torch.ops.septran.rope(x, cos[:1], sin[:1], out_seq_major)  # one table for every batch: (S, D)
    assert_flash_rule(shared, apply_rotary(x.double(), cos[:1].double(), sin[:1].double()),
                      apply_rotary(x, cos[:1], sin[:1]))


class Rotary(torch.nn.Module):
    def __init__(self, heads=3, dim=8, order="llama"):
        super().__init__()
        self.h, self.d, self.order = heads, dim, order

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = x.view(b, s, self.h, self.d).transpose(1, 2)
        if self.order == "llama":
            return apply_rotary(q, cos, sin)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return sin * rotate_half(q) + cos * q  # the sum and the products the other way round


@pytest.mark.parametrize("order", ["llama", "reversed"])
def test_rope_pattern(order):
    b, s = 2, 7
    x, (cos, sin) = _rand(b, s, 24, seed=1), tables(b, s, 8)
    (gm,) = capture(Rotary(order=order), x, cos, sin)
    found = [m for m in matches(gm, Rope())]
    assert len(found) == 1 and isinstance(found[0], Match), found
    assert found[0].op is torch.ops.septran.rope.default and len(found[0].nodes) == 7
    record = []
    out = compile_with(Rotary(order=order), Rope(), record=record)(x, cos, sin)
    assert len(record) == 1
    ref = Rotary(order=order)(x.double(), cos.double(), sin.double())
    assert_flash_rule(out, ref, Rotary(order=order)(x, cos, sin))


def test_rope_pattern_refuses_fp64_and_ignores_other_rotations():
    b, s = 1, 4
    x, (cos, sin) = _rand(b, s, 24, seed=1, dtype=torch.float64), tables(b, s, 8, dtype=torch.float64)
    (gm,) = capture(Rotary(), x, cos, sin)
    (found,) = matches(gm, Rope())
    assert isinstance(found, Refusal) and "float64" in found.why

    class Interleaved(torch.nn.Module):  # GPT-J's rotation of pairs: not rotate_half
        def forward(self, q, cos, sin):
            rot = torch.stack((-q[..., 1::2], q[..., ::2]), dim=-1).flatten(-2)
            return q * cos + rot * sin

    q = _rand(1, 2, 4, 8, seed=2)
    (gm,) = capture(Interleaved(), q, *tables(1, 4, 8))
    assert matches(gm, Rope()) == []


class MLP(torch.nn.Module):
    """Llama's MLP: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, dim=32, hidden=88, swapped=False):
        super().__init__()
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)
        self.swapped = swapped

    def forward(self, x):
        if self.swapped:
            return self.down(self.up(x) * F.silu(self.gate(x)))
        return self.down(F.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("shape, dtype", [((3, 17, 32), torch.float32), ((29, 32), torch.float32),
                                          ((2, 9, 32), torch.bfloat16), ((2, 9, 32), torch.float16)])
def test_swiglu_op_matches_torch(shape, dtype):
    x = _rand(*shape, seed=1, dtype=dtype)
    wg, wu = _rand(88, 32, seed=2, dtype=dtype), _rand(88, 32, seed=3, dtype=dtype)
    ref = F.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    torch_out = F.silu(x @ wg.T) * (x @ wu.T)
    assert_flash_rule(torch.ops.septran.swiglu(x, wg, wu, True), ref, torch_out)
    assert_flash_rule(torch.ops.septran.swiglu(x, wg.T.contiguous(), wu.T.contiguous(), False), ref, torch_out)


@pytest.mark.parametrize("swapped", [False, True])
def test_swiglu_pattern_leaves_the_down_projection(swapped):
    model = MLP(swapped=swapped).eval()
    x = _rand(2, 9, 32, seed=1)
    (gm,) = capture(model, x)
    found = [m for m in matches(gm, SwiGLU()) if isinstance(m, Match)]
    assert len(found) == 1 and found[0].args[3] is True
    assert sum(n.target is torch.ops.aten.mm.default for n in found[0].nodes) == 2
    record = []
    with torch.no_grad():
        out = compile_with(model, SwiGLU(), record=record)(x)
        ref = model.double()(x.double())
        torch_out = model.float()(x)
    assert len(record) == 1
    assert_flash_rule(out, ref, torch_out)


def test_swiglu_comes_before_the_plain_gemm():
    names = [type(p).__name__ for p in PATTERNS]
    gemm = [i for i, n in enumerate(names) if "gemm" in n.lower() or "linear" in n.lower() or "matmul" in n.lower()]
    assert all(names.index("SwiGLU") < i for i in gemm)


def test_32_lengths_build_once(monkeypatch):
    """RoPE and the SwiGLU MLP of a decoder over 32 sequence lengths: one build each per shape bucket of the
    mapping (the cpu SwiGLU's shape_points: one row, at most 16 rows, at most 192 rows of float32 and more run points
    of their own, so lengths 1, 2, 17 and 200 build it; no other length does)."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rot, self.mlp = Rotary(heads=4, dim=8), MLP()

        def forward(self, x, cos, sin):
            return self.rot(x, cos, sin), self.mlp(x)

    kernels.clear()
    built = _count_builds(monkeypatch)
    model = Block().eval()
    record = []
    compiled = compile_with(model, SwiGLU(), Rope(), record=record)
    lengths = list(range(1, 21)) + [31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200, 257]
    assert len(set(lengths)) == 32
    after = {}
    for s in lengths:
        x, (cos, sin) = _rand(1, s, 32, seed=s), tables(1, s, 8)
        with torch.no_grad():
            rot, mlp = compiled(x, cos, sin)
            rot_ref, mlp_ref = model.double()(x.double(), cos.double(), sin.double())
            rot_t, mlp_t = model.float()(x, cos, sin)
        assert_flash_rule(rot, rot_ref, rot_t, f"rope at {s}")
        assert_flash_rule(mlp, mlp_ref, mlp_t, f"swiglu at {s}")
        after[s] = len(built)
    assert {m.pattern for m in record} == {"rope", "swiglu"}
    assert after[1] == 2 and after[2] == after[16] == 3 and after[129] == after[17] == 4, after
    assert after[257] == after[200] == 5, after  # more than 192 rows: float32's other SwiGLU point


def test_empty_sizes_are_torchs():
    x = torch.zeros(2, 3, 0, 8)
    assert torch.ops.septran.rope(x, torch.zeros(0, 8), torch.zeros(0, 8), False).shape == (2, 3, 0, 8)
    assert torch.equal(torch.ops.septran.swiglu(torch.zeros(0, 4), torch.zeros(5, 4), torch.zeros(5, 4), True),
                       torch.zeros(0, 5))
    assert torch.equal(torch.ops.septran.swiglu(torch.zeros(3, 0), torch.zeros(5, 0), torch.zeros(5, 0), True),
                       torch.zeros(3, 5))


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target, arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_gpu_programs_build_with_dynamic_lengths(target, arch):
    """The model's variants (weights (N, K), dynamic tokens and sequence) make GPU programs without spills."""
    from septran.ops.rope import rope_kernel
    from septran.ops.swiglu import swiglu_kernel
    from support.cuda_tools import nvcc_resource_usage

    f16 = "float16"
    for variant in (swiglu_kernel(target, True).specialize(X=((100, 1024), f16), Wg=((2816, 1024), f16),
                                                           Wu=((2816, 1024), f16)),
                    rope_kernel(target).specialize(X=((1, 100, 8, 64), f16), C=((100, 64), f16), S=((100, 64), f16))):
        assert 'T.dynamic("X_dim' in variant.tilelang_source
        usage = nvcc_resource_usage(variant, arch)
        assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def test_patterns_on_graphs_with_every_dimension_symbolic():
    """torch.compile(dynamic=True) makes every size a symbol (the head dimension too): the patterns still match."""
    from septran.model.patterns.attention import Attention
    from test_model_attention import LlamaAttention

    b, s = 2, 7
    x, (cos, sin) = _rand(b, s, 24, seed=1), tables(b, s, 8)
    (gm,) = capture(Rotary(), x, cos, sin, dynamic=True)
    assert [m.pattern for m in matches(gm, Rope()) if isinstance(m, Match)] == ["rope"]
    (gm,) = capture(MLP().eval(), _rand(2, 9, 32, seed=1), dynamic=True)
    assert [m.pattern for m in matches(gm, SwiGLU()) if isinstance(m, Match)] == ["swiglu"]
    (gm,) = capture(LlamaAttention().eval(), _rand(2, 11, 32, seed=1), dynamic=True)
    found = [m for m in matches(gm, Attention()) if isinstance(m, Match)]
    assert len(found) == 1 and "grouped heads" in found[0].kernel
