"""GPU targets without a GPU: the CUDA/HIP SepTran generates, its cubins, and parity with hand-written TileLang."""
from __future__ import annotations

import pytest

import septran
from conftest import GEMM_LOGIC, mapping_path, needs_nvcc
from support.cuda_tools import lower_device_source, normalize_cuda, nvcc_resource_usage
from reference.handwritten_gemm import handwritten_gemm

SHAPE = dict(A=((1024, 1024), "float16"), B=((1024, 1024), "float16"))
ARCH = {"sm80": "sm_80", "sm90": "sm_90a"}


def _variant(target: str, shape=SHAPE):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(target))
    return kernel, kernel.specialize(**shape)


@pytest.fixture(scope="module")
def sm90():
    return _variant("sm90")


@pytest.fixture(scope="module")
def sm80():
    return _variant("sm80")


@pytest.mark.build
def test_sm90_uses_tma_and_wgmma(sm90):
    cuda = sm90[1].device_source
    assert "tl::tma_load(" in cuda, "A and B tiles should arrive by TMA"
    assert "wgmma" in cuda, "T.gemm should become WGMMA on sm_90a"
    assert "cp_async" not in cuda


@pytest.mark.build
def test_sm80_uses_cp_async_and_mma(sm80):
    cuda = sm80[1].device_source
    assert "cp_async" in cuda
    assert "mma" in cuda and "wgmma" not in cuda and "tma_load" not in cuda


@pytest.mark.build
def test_gfx942_uses_mfma():
    hip = _variant("gfx942")[1].device_source
    assert "mfma" in hip


def _handwritten_cuda(target: str, kernel) -> str:
    """The same GEMM written by hand in TileLang, with the tile sizes, stages and threads of the mapping."""
    consts = {c.sym.name: c.value for c in kernel._last.program.consts}
    block = kernel.mapping.instance("gemm_block_gpu")
    func = handwritten_gemm(
        1024, 1024, 1024, consts["BM"], consts["BN"], consts["BK"],
        num_stages=block.pipeline.value, threads=block.threads.value,
    )
    return lower_device_source(func, kernel.target.tilelang_target)


@pytest.mark.parametrize("target", ["sm90", "sm80"])
@pytest.mark.build
def test_same_cuda_as_handwritten_tilelang(target, sm90, sm80):
    kernel, variant = {"sm90": sm90, "sm80": sm80}[target]
    ours = normalize_cuda(variant.device_source)
    theirs = normalize_cuda(_handwritten_cuda(target, kernel))
    assert ours == theirs


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm90", "sm80"])
def test_cubin_builds_without_spills(target, sm90, sm80):
    variant = {"sm90": sm90, "sm80": sm80}[target][1]
    usage = nvcc_resource_usage(variant, ARCH[target])
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert 0 < usage["registers"] <= 255, usage


@needs_nvcc
@pytest.mark.slow
def test_tilelang_compile_builds_the_sm90_cubin():
    """The full build path (tilelang.compile -> nvcc) runs here with no driver."""
    kernel, variant = _variant("sm90", dict(A=((512, 256), "float16"), B=((256, 384), "float16")))
    compiled = variant.build()
    assert "gemm_host_kernel" in compiled.get_kernel_source()
