"""FlashAttention forward (examples/attention): CPU numerics, code for every target, parity with TileLang's own."""
from __future__ import annotations

import math

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, edited_mapping, load_module, mapping_path, needs_nvcc
from reference.handwritten_attention import tilelang_example
from support.cuda_tools import canonical_names, lower_device_source, normalize_cuda, nvcc_resource_usage

logic = load_module(REPO / "examples" / "attention" / "attention.py")

KERNELS: dict = {}


def kernel(causal: bool, target: str = "cpu"):
    key = (causal, target)
    if key not in KERNELS:
        KERNELS[key] = septran.compile(logic.attention(causal), mapping_file=mapping_path(target, "attention"))
    return KERNELS[key]


def reference(q, k, v, causal, scale=None):
    """Plain softmax attention; a query that sees no key gets zeros, as torch's scaled_dot_product_attention gives."""
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if not causal:
        return torch.softmax(s, dim=-1) @ v
    sq, sk = q.shape[-2], k.shape[-2]
    sees = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    p = torch.softmax(s.masked_fill(~sees, float("-inf")), dim=-1)
    return p.masked_fill(~sees.any(-1, keepdim=True), 0.0) @ v


def _qkv(b, h, sq, sk, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=gen).to(dtype) for s in (sq, sk, sk))


SHAPES = [(1, 2, 113, 203, 64), (2, 1, 203, 203, 40), (1, 3, 113, 113, 40), (2, 2, 203, 113, 64)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.build
def test_cpu_matches_torch(causal, dtype, shape):
    """Sequence lengths 113 and 203 (neither a multiple of the 32-row tiles), head dims 64 and 40, Sq < = > Sk.

    With more queries than keys, the causal mask leaves the first Sq - Sk queries no key at all:
    their rows are zeros, as torch's scaled_dot_product_attention gives.
    """
    q, k, v = _qkv(*shape, dtype, seed=sum(shape))
    out = kernel(causal)(q, k, v)
    assert out.shape == q.shape and out.dtype == dtype
    assert_flash_rule(out, reference(q.float(), k.float(), v.float(), causal), reference(q, k, v, causal), f"{shape} {dtype}")


@pytest.mark.build
def test_scale_is_a_scalar_argument():
    q, k, v = _qkv(1, 1, 50, 70, 16, torch.float32, 3)
    out = kernel(True)(q, k, v, sm_scale=0.5)
    assert_flash_rule(out, reference(q, k, v, True, 0.5), reference(q, k, v, True, 0.5))
    assert (out - kernel(True)(q, k, v)).abs().max() > 1e-3  # the default, 1 / sqrt(16), differs


def test_only_q_k_v_are_inputs():
    kern = kernel(False)
    assert [a.name for a in kern.inputs] == ["Q", "K", "V"] and [a.name for a in kern.outputs] == ["O"]


SM90 = dict(Q=((1, 2, 1024, 64), "float16"), K=((1, 2, 1024, 64), "float16"), V=((1, 2, 1024, 64), "float16"))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_attention_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    shapes = dict(Q=((2, 4, 203, 64), dtype), K=((2, 4, 331, 64), dtype), V=((2, 4, 331, 64), dtype))
    golden(f"attention.{target}.py", kernel(True, target).specialize(**shapes).tilelang_source)


@pytest.mark.parametrize("target,needles", [("sm90", ("tl::tma_load(", "wgmma", "AllReduce")),
                                            ("sm80", ("cp_async", "mma", "AllReduce")), ("gfx942", ("mfma",))])
@pytest.mark.build
def test_device_code(target, needles):
    src = kernel(False, target).specialize(**SM90).device_source
    for needle in needles:
        assert needle in src


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_cubin_has_no_spills(target, arch, causal, head_dim):
    shapes = {name: ((1, 2, 1024, head_dim), "float16") for name in ("Q", "K", "V")}
    usage = nvcc_resource_usage(kernel(causal, target).specialize(**shapes), arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def _cuda(prim_func) -> str:
    return normalize_cuda(lower_device_source(prim_func, {"kind": "cuda", "arch": "sm_90a"}))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1024, 1024), (203, 331)])
@pytest.mark.build
def test_sm90_cuda_equals_tilelangs_own_example(causal, seq_q, seq_kv):
    """Same blocks (128 x 128), stages (2) and threads (256) as mappings/sm90/attention.yaml: the CUDA of
    TileLang's example as shipped, statement for statement, up to the names of variables."""
    shapes = dict(Q=((1, 2, seq_q, 64), "float16"), K=((1, 2, seq_kv, 64), "float16"), V=((1, 2, seq_kv, 64), "float16"))
    ours = normalize_cuda(kernel(causal, "sm90").specialize(**shapes).device_source)
    theirs = _cuda(tilelang_example(1, 2, seq_q, seq_kv, 64, causal, 128, 128, 2, 256))
    assert canonical_names(ours) == canonical_names(theirs)


def test_output_through_shared_is_the_mappings_choice(tmp_path):
    """Without `copy: {O: {via: SHARED}}` the output goes from registers straight to global memory: the
    same kernel but for the final store (no O_shared)."""
    path = edited_mapping(tmp_path, "sm90", "attention", ("copy: {O: {via: SHARED}}", ""))
    direct = septran.compile(logic.attention(False), mapping_file=path).specialize(**SM90)
    via = kernel(False, "sm90").specialize(**SM90)
    assert "O_shared" in via.tilelang_source and "O_shared" not in direct.tilelang_source
    assert "T.copy(O_local, O_shared)\n        T.copy(O_shared, O[bz, by, bx * BM, 0])" in via.tilelang_source
    assert "T.copy(O_local, O[bz, by, bx * BM, 0])" in direct.tilelang_source


def test_via_must_name_an_on_chip_memory(tmp_path):
    path = edited_mapping(tmp_path, "sm90", "attention", ("{O: {via: SHARED}}", "{O: {via: GLOBAL}}"))
    with pytest.raises(septran.MappingError) as info:
        septran.compile(logic.attention(False), mapping_file=path)
    assert "attn_block.copy.O.via: BLOCK on sm90 cannot stage a transfer through GLOBAL" in str(info.value)
    assert "via: GLOBAL" in path.read_text().splitlines()[info.value.loc.line - 1]


def test_head_dim_the_tensor_cores_cannot_take_is_refused():
    """WGMMA takes K in multiples of 16: head dim 40 is refused at the binding, before TileLang runs."""
    shapes = dict(Q=((1, 1, 128, 40), "float16"), K=((1, 1, 128, 40), "float16"), V=((1, 1, 128, 40), "float16"))
    with pytest.raises(septran.LoweringError, match="multiple of 16; the tile has 40"):
        kernel(False, "sm90").specialize(**shapes)


def test_sm80_pipelines_the_causal_loop_over_one_stage():
    """sm80's target says TileLang cannot pipeline a block-dependent trip count over more stages; the
    non-causal loop keeps the mapping's two, and explain() says why the causal one has one."""
    full, causal = kernel(False, "sm80").specialize(**SM90), kernel(True, "sm80").specialize(**SM90)
    assert "num_stages=2" in full.tilelang_source and "num_stages=1" in causal.tilelang_source
    assert "takes at most 1 where the trip count is not a constant" in causal.explain()
