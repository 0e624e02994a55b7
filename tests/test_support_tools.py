"""The test helpers themselves: source-only lowering, comparison up to names, nvcc resource usage, hand-written GEMMs.

Everything here runs without a GPU; the nvcc tests skip where nvcc is absent.
"""
from __future__ import annotations

import pytest
import torch

from reference.handwritten_gemm import handwritten_gemm, handwritten_gemm_cpu
from support.cuda_tools import lower_device_source, normalize_cuda, nvcc_path, nvcc_resource_usage

SM90 = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}
GFX942 = {"kind": "hip", "mcpu": "gfx942"}

# (M, N, K, block_M, block_N, block_K, num_stages, threads)
SM90_GEMM = (1024, 1024, 1024, 128, 256, 64, 3, 256)
SM80_GEMM = (1024, 1024, 1024, 128, 128, 32, 3, 128)

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def sm90_src():
    return lower_device_source(handwritten_gemm(*SM90_GEMM), SM90)


@pytest.fixture(scope="module")
def sm80_src():
    return lower_device_source(handwritten_gemm(*SM80_GEMM), SM80)


# (a) what each target's source contains


@pytest.mark.build
def test_sm90_source_has_tma_and_wgmma(sm90_src):
    assert "tl::tma_load(" in sm90_src
    assert "wgmma" in sm90_src
    assert "cp_async" not in sm90_src


@pytest.mark.build
def test_sm80_source_has_cp_async_and_mma(sm80_src):
    assert "cp_async" in sm80_src
    assert "mma_sync" in sm80_src
    assert "wgmma" not in sm80_src and "tma_load" not in sm80_src


@pytest.mark.build
def test_gfx942_source_has_mfma():
    src = lower_device_source(handwritten_gemm(*SM80_GEMM), GFX942)
    assert "__builtin_amdgcn_mfma_f32_16x16x16f16" in src


# (b) normalize_cuda: equal up to names, and only up to names


@pytest.mark.build
def test_normalize_ignores_kernel_name(sm90_src):
    renamed = lower_device_source(handwritten_gemm(*SM90_GEMM).with_attr("global_symbol", "gemm_host"), SM90)
    assert "gemm_host_kernel" in renamed and "main_kernel" not in renamed
    assert renamed != sm90_src
    assert normalize_cuda(renamed) == normalize_cuda(sm90_src)


@pytest.mark.build
def test_normalize_keeps_a_different_block_k(sm90_src):
    M, N, K, bm, bn, _, stages, threads = SM90_GEMM
    other = lower_device_source(handwritten_gemm(M, N, K, bm, bn, 32, stages, threads), SM90)
    assert normalize_cuda(other) != normalize_cuda(sm90_src)


def test_normalize_on_a_small_source():
    a = (
        "// tilelang target: cuda -arch=sm_80\n"
        'extern "C" __global__ void main_kernel(float* A);\n'
        'extern "C" __global__ void __launch_bounds__(128, 1) main_kernel(float* A) {   \n'
        "  // a comment\n"
        "  for (int i = 0; i < 4; ++i) { A[i] = 0.f; }\n"
        "}\n"
    )
    b = a.replace("main_kernel", "gemm_host_kernel").replace("sm_80", "sm_90a").replace("a comment", "another")
    assert normalize_cuda(a) == normalize_cuda(b)
    assert "main_kernel" not in normalize_cuda(a) and normalize_cuda(a).count("KERNEL") == 2
    assert "//" not in normalize_cuda(a)
    assert normalize_cuda(a) != normalize_cuda(a.replace("i < 4", "i < 8"))
    assert normalize_cuda(a) != normalize_cuda(a.replace("(128, 1)", "(256, 1)"))


# (c) nvcc builds both cubins without spills


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("which", ["sm90", "sm80"])
def test_nvcc_resource_usage(which, request):
    src = request.getfixturevalue(f"{which}_src")
    usage = nvcc_resource_usage(src, {"sm90": "sm_90a", "sm80": "sm_80"}[which])
    assert set(usage) == {"registers", "spill_stores", "spill_loads", "stack"}
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    # sm_90a launches 384 threads (a producer warpgroup is added): at most 65536 / 384 = 170 registers.
    assert 64 <= usage["registers"] <= (170 if which == "sm90" else 255), usage


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.slow
def test_a_recorded_nvcc_answer_is_what_nvcc_says(sm80_src):
    """The tests read nvcc's answers from tests/golden/nvcc/ (support/cuda_tools.py): one is checked against nvcc."""
    recorded = nvcc_resource_usage(sm80_src, "sm_80")
    assert nvcc_resource_usage(sm80_src, "sm_80", fresh=True) == recorded


@needs_nvcc
@pytest.mark.nvcc
def test_nvcc_failure_raises_with_stderr():
    with pytest.raises(RuntimeError, match="nvcc failed"):
        nvcc_resource_usage('extern "C" __global__ void k() { this is not C++; }\n', "sm_80")


# (d) the CPU hand-written GEMM is correct


@pytest.mark.build
def test_cpu_handwritten_gemm_matches_torch():
    import tilelang

    M, N, K = 257, 129, 95
    kernel = tilelang.compile(handwritten_gemm_cpu(M, N, K, 32, 32, 32, dtype="float32"), target="c", compile_flags=["-O3"])
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g)
    b = torch.randn(K, N, generator=g)
    c = torch.empty(M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
