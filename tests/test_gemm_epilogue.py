"""GEMM with a fused epilogue (bias, then relu / gelu / silu) and the transposed-A / -B variants."""
from __future__ import annotations


import pytest
import torch

import septran
from conftest import REPO, load_module, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

logic = load_module(REPO / "examples" / "gemm_epilogue" / "gemm_epilogue.py")

ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}
LAYOUTS = {"nn": (False, False), "tn": (True, False), "nt": (False, True)}


def _inputs(M, N, K, ta, tb, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(*((K, M) if ta else (M, K)), generator=gen).to(dtype)
    b = torch.randn(*((N, K) if tb else (K, N)), generator=gen).to(dtype)
    return a, b, torch.randn(N, generator=gen).to(dtype)


def _reference(act, a, b, bias, ta, tb):
    return ACTIVATIONS[act]((a.t() if ta else a) @ (b.t() if tb else b) + bias)


def _check(out, act, a, b, bias, ta, tb):
    """FlashAttention's rule: at most twice torch's own error in the input dtype (ref in float64)."""
    ref = _reference(act, a.double(), b.double(), bias.double(), ta, tb)
    torch_err = (_reference(act, a, b, bias, ta, tb).double() - ref).abs().max().item()
    err = (out.double() - ref).abs().max().item()
    assert err <= 2 * torch_err + 1e-5, f"max |out - ref| = {err:.3e}, torch's = {torch_err:.3e}"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.build
def test_cpu_matches_torch_fp32(act, layout):
    ta, tb = LAYOUTS[layout]
    kernel = septran.compile(logic.gemm_epilogue(act, ta, tb), mapping_file=mapping_path("cpu", "gemm_epilogue"))
    for M, N, K in [(64, 64, 64), (257, 129, 95)]:
        a, b, bias = _inputs(M, N, K, ta, tb, torch.float32, M + N + K)
        c = kernel(a, b, bias)
        assert c.shape == (M, N)
        _check(c, act, a, b, bias, ta, tb)


@pytest.mark.parametrize("act,layout", [("gelu", "nn"), ("silu", "tn"), ("relu", "nt")])
@pytest.mark.build
def test_cpu_matches_torch_fp16(act, layout):
    ta, tb = LAYOUTS[layout]
    kernel = septran.compile(logic.gemm_epilogue(act, ta, tb), mapping_file=mapping_path("cpu", "gemm_epilogue"))
    a, b, bias = _inputs(100, 37, 300, ta, tb, torch.float16, 7)
    c = kernel(a, b, bias)
    assert c.dtype == torch.float16
    _check(c, act, a, b, bias, ta, tb)


def test_c_is_still_an_output():
    """The gemm reduces into C, then the epilogue rewrites it: C is allocated by the kernel, not passed."""
    kernel = septran.compile(logic_file=REPO / "examples" / "gemm_epilogue" / "gemm_epilogue.py",
                             mapping_file=mapping_path("cpu", "gemm_epilogue"))
    assert [a.name for a in kernel.inputs] == ["A", "B", "bias"] and [a.name for a in kernel.outputs] == ["C"]


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_epilogue_matches_golden(target, golden):
    kernel = septran.compile(logic.gemm_epilogue("gelu", False, True), mapping_file=mapping_path(target, "gemm_epilogue"))
    dtype = "float32" if target == "cpu" else "float16"
    variant = kernel.specialize(A=((700, 320), dtype), B=((500, 320), dtype), bias=((500,), dtype))
    golden(f"gemm_epilogue.{target}.py", variant.tilelang_source)


@pytest.mark.parametrize("target,needles", [("sm90", ("tl::tma_load(", "wgmma", "erf")), ("sm80", ("cp_async", "mma", "erf")),
                                            ("gfx942", ("mfma", "erf"))])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.build
def test_device_code(target, needles, layout):
    ta, tb = LAYOUTS[layout]
    kernel = septran.compile(logic.gemm_epilogue("gelu", ta, tb), mapping_file=mapping_path(target, "gemm_epilogue"))
    src = kernel.specialize(A=((512, 1024) if ta else (1024, 512), "float16"),
                            B=((1024, 512) if tb else (512, 1024), "float16"), bias=((1024,), "float16")).device_source
    for needle in needles:
        assert needle in src


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_cubin_has_no_spills(target, arch):
    kernel = septran.compile(logic.gemm_epilogue("gelu"), mapping_file=mapping_path(target, "gemm_epilogue"))
    variant = kernel.specialize(A=((1024, 1024), "float16"), B=((1024, 1024), "float16"), bias=((1024,), "float16"))
    usage = nvcc_resource_usage(variant, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def test_dsa_cannot_transpose(tmp_path):
    """A DSA's matrix unit has no transposed operands: binding a transposed gemm to it is refused at the binding."""
    text = (REPO / "mappings" / "dsa_ref" / "gemm.yaml").read_text()
    text = text.replace("gemm_host_logic", "gemm_epilogue_logic").replace("gemm_block_logic", "epi_block_logic")
    text = text.replace("{gemm_leaf_logic: gemm_leaf_systolic}", "{epi_gemm_leaf: gemm_leaf_systolic, epi_bias_leaf: gemm_leaf_systolic, epi_act_leaf: gemm_leaf_systolic}")
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(septran.MappingError, match="gemm_leaf_systolic cannot run 'gemm_bt': it does not support transpose_B"):
        septran.compile(logic.gemm_epilogue("relu", False, True), mapping_file=tmp_path / "m.yaml")
