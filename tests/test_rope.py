"""Rotary position embedding (examples/rope): numerics on the CPU, generated code for every target."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, load_module, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

logic = load_module(REPO / "examples" / "rope" / "rope.py")
run_rope = load_module(REPO / "examples" / "rope" / "run_rope.py")

KERNELS: dict = {}


def kernel(target: str = "cpu"):
    if target not in KERNELS:
        KERNELS[target] = septran.compile(logic.rope_logic, mapping_file=mapping_path(target, "rope"))
    return KERNELS[target]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("batch,seq,heads,head_dim", [(1, 1, 1, 2), (2, 37, 3, 10), (3, 9, 5, 64)])
@pytest.mark.build
def test_cpu_matches_torch(dtype, batch, seq, heads, head_dim):
    """Odd sequence lengths (the last block of positions overhangs), odd head counts, tiny and real head dims."""
    gen = torch.Generator().manual_seed(seq * head_dim)
    x = torch.randn(batch, seq, heads, head_dim, generator=gen, dtype=torch.float64)
    cos, sin = run_rope.tables(seq, head_dim)
    ref = run_rope.apply_rope(x, cos, sin)
    out = kernel()(x.to(dtype), cos.to(dtype), sin.to(dtype))
    assert out.dtype == dtype and out.shape == x.shape
    tol = 1e-5 if dtype == torch.float32 else 4e-3
    assert (out.double() - ref).abs().max().item() < tol


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_rope_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    shapes = dict(X=((4, 2048, 32, 128), dtype), C=((2048, 128), dtype), S=((2048, 128), dtype))
    golden(f"rope.{target}.py", kernel(target).specialize(**shapes).tilelang_source)


@pytest.mark.build
@pytest.mark.parametrize("target", ["sm90", "gfx942"])
@pytest.mark.parametrize("heads,head_dim", [(3, 64), (14, 64), (12, 96)])
def test_gpu_mappings_take_any_head_count(target, heads, head_dim):
    """TileLang 0.1.15 lays out no tile whose head count is not a power of two ("Mapped indices are not
    independent", "no available layout found": GPT-2's 12 heads, Qwen2's 14, an H100 run's 3): the GPU mappings
    run the logic's rope_heads_logic, blocks of BH heads, and TileLang lowers every head count."""
    x, c = torch.empty(1, 37, heads, head_dim, dtype=torch.float16), torch.empty(37, head_dim, dtype=torch.float16)
    variant = kernel(target).specialize(X=x, C=c, S=c)
    assert "BH = " in variant.tilelang_source
    assert variant.device_source


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_cubin_has_no_spills(target, arch):
    shapes = dict(X=((4, 2048, 32, 128), "float16"), C=((2048, 128), "float16"), S=((2048, 128), "float16"))
    usage = nvcc_resource_usage(kernel(target).specialize(**shapes), arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def test_rope_in_a_register_tile_is_refused_at_the_mems_line(tmp_path):
    """On GPUs a fragment is spread over the threads: X read at j + half must be in shared or global memory."""
    text = mapping_path("sm80", "rope").read_text().replace("X: SHARED", "X: REGISTER")
    path = tmp_path / "rope.yaml"
    path.write_text(text)
    k = septran.compile(logic.rope_logic, mapping_file=path)
    with pytest.raises(septran.LoweringError) as info:
        k.specialize(X=((2, 37, 4, 64), "float16"), C=((37, 64), "float16"), S=((37, 64), "float16"))
    msg = str(info.value)
    assert "reads X away from the compute's own indices" in msg and "X[b, s, h, j + (X.shape[3] // 2)]" in msg
    assert "rope.yaml:" in msg and "mems: {X: SHARED}" in msg
