"""Batched GEMM (examples/bmm): one logic file, every target; batch tiles of one become plain tiles."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, assert_gemm_close, first_point_text, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

BMM_LOGIC = REPO / "septran" / "ops" / "logic" / "bmm.py"
SHAPES = [(1, 64, 64, 64), (5, 33, 17, 70), (3, 129, 65, 95)]  # (batch, M, N, K)


@pytest.fixture(scope="module", params=["cpu", "dsa_ref", "dsa_acme"])
def runnable(request):
    return septran.compile(logic_file=BMM_LOGIC, mapping_file=mapping_path(request.param, "bmm"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.build
def test_bmm_matches_torch(runnable, shape, dtype):
    batch, M, N, K = shape
    gen = torch.Generator().manual_seed(batch * 1000 + M + N + K)
    a = (torch.rand(batch, M, K, generator=gen) * 2 - 1).to(dtype)
    b = (torch.rand(batch, K, N, generator=gen) * 2 - 1).to(dtype)
    c = runnable(a, b)
    assert c.shape == (batch, M, N) and c.dtype == dtype
    assert_gemm_close(c, a, b)


def test_batch_mismatch_is_a_call_error(runnable):
    with pytest.raises(septran.CallError, match=r"A.shape\[0\] is 2 but B.shape\[0\] is 3"):
        runnable(torch.randn(2, 8, 8), torch.randn(3, 8, 8))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_bmm_matches_golden(target, golden):
    kernel = septran.compile(logic_file=BMM_LOGIC, mapping_file=mapping_path(target, "bmm"))
    dtype = "float32" if target == "cpu" else "float16"
    variant = kernel.specialize(A=((6, 500, 320), dtype), B=((6, 320, 260), dtype))
    golden(f"bmm.{target}.py", variant.tilelang_source)
    assert "T.Kernel(T.ceildiv(B_dim2, BN), T.ceildiv(A_dim1, BM), A_dim0" in variant.tilelang_source


@pytest.mark.parametrize("target,needles", [("sm90", ("tl::tma_load(", "wgmma")), ("sm80", ("cp_async", "mma")),
                                            ("gfx942", ("mfma",))])
@pytest.mark.build
def test_bmm_device_code_uses_the_matrix_units(target, needles):
    kernel = septran.compile(logic_file=BMM_LOGIC, mapping_file=mapping_path(target, "bmm"))
    src = kernel.specialize(A=((4, 512, 256), "float16"), B=((4, 256, 384), "float16")).device_source
    for needle in needles:
        assert needle in src


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_bmm_cubin_has_no_spills(target, arch):
    kernel = septran.compile(logic_file=BMM_LOGIC, mapping_file=mapping_path(target, "bmm"))
    variant = kernel.specialize(A=((4, 1024, 512), "float16"), B=((4, 512, 1024), "float16"))
    usage = nvcc_resource_usage(variant, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def test_a_batch_tile_larger_than_one_is_refused(tmp_path):
    logic = tmp_path / "bmm2.py"
    logic.write_text(BMM_LOGIC.read_text().replace("tile=(1, ", 'tile=("BB", '))
    text = first_point_text("sm90", "bmm").replace("tunables: {", "tunables: {BB: 2, ")
    (tmp_path / "m.yaml").write_text(text)
    kernel = septran.compile(logic_file=logic, mapping_file=tmp_path / "m.yaml")
    with pytest.raises(septran.LoweringError, match="gemm_leaf_tensorcore takes C as a 2-D tile") as info:
        kernel.specialize(A=((4, 256, 128), "float16"), B=((4, 128, 256), "float16"))
    assert "leaf_task_bindings" in str(info.value)
