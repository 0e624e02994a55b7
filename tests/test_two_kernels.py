"""`combine: two_kernels` (lowering/two_kernels.py): the programs of a split reduction store their partial sums
into a workspace, one slot per program, and a second kernel of the same program adds the slots into Y."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

import septran
from conftest import needs_nvcc
from support.cuda_tools import nvcc_resource_usage
from test_split_reduce import CPU, GPU

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "reduce"))
from split_sum import split_sum  # noqa: E402

TWO = "    combine: two_kernels\n    calls: {split_block"


def _gpu(target: str) -> str:
    return GPU.replace("TARGET", target).replace("    combine: atomic\n    calls: {split_block", TWO)


def _cpu() -> str:
    return CPU.replace("    calls: {split_block", TWO)


@pytest.mark.parametrize("m, n", [(1001, 333), (128, 64), (7, 5), (2000, 1), (300, 1000)])
@pytest.mark.build
def test_cpu_partial_sums_then_their_sum_match_torch(m, n):
    kernel = septran.compile(split_sum, mapping=_cpu())
    for seed in range(2):  # the second call takes the remembered plan: its workspace is allocated again
        x = torch.randn(m, n, generator=torch.Generator().manual_seed(m + seed))
        y = torch.full((n,), 5.0)  # the kernel adds into the caller's Y
        kernel(y, x)
        torch.testing.assert_close(y.double(), 5.0 + x.double().sum(0), rtol=1e-5, atol=1e-4)


def test_cpu_two_kernels_in_the_source_and_explain():
    v = septran.compile(split_sum, mapping=_cpu()).specialize(Y=((333,), "float32"), X=((1001, 333), "float32"))
    src = v.tilelang_source
    assert "Y_parts: T.Tensor((T.ceildiv(X_dim0, BP) * Y_dim0,), \"float32\")," in src
    assert src.count("with T.Kernel(") == 2
    assert "if bx * BN + j < Y_dim0: Y_parts[by * Y_dim0 + bx * BN + j] = acc[j]" in src
    assert "if bx * BN + j < Y_dim0: Y[bx * BN + j] = Y[bx * BN + j] + Y_parts[p * Y_dim0 + bx * BN + j]" in src
    assert v.program.workspaces == (("Y_parts", (8 * 333,), "float32"),)
    explained = v.explain()
    assert "Y_parts: ((ceildiv(X_dim0, BP) * Y_dim0)) float32 (workspace)" in explained
    assert "then grid bx < ceildiv(Y_dim0, BN)" in explained and "the 8 slots of Y_parts, in order" in explained


@pytest.mark.parametrize("target", ["sm90", "sm80", "gfx942"])
@pytest.mark.parametrize("n", [4096, 4001])
@pytest.mark.build
def test_gpu_two_kernels_lower(target, n):
    v = septran.compile(split_sum, mapping=_gpu(target)).specialize(Y=((n,), "float32"), X=((1000, n), "float32"))
    src = v.tilelang_source
    assert src.count("with T.Kernel(") == 2 and "T.atomic_add" not in src
    assert "for p in T.serial(T.ceildiv(X_dim0, BP)):" in src and "for j in T.Parallel(BN):" in src
    assert v.device_source.count("__global__ void __launch_bounds__") == 2  # TileLang's two kernels, in order
    assert v.program.workspaces == (("Y_parts", (4 * n,), "float32"),)


@needs_nvcc
@pytest.mark.parametrize("target, arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_gpu_two_kernels_build_with_nvcc(target, arch):
    v = septran.compile(split_sum, mapping=_gpu(target)).specialize(Y=((4001,), "float32"), X=((1000, 4001), "float32"))
    usage = nvcc_resource_usage(v.device_source, arch)
    assert usage["spill_stores"] == 0, usage


def test_target_without_two_kernels_is_refused_at_the_combine_line():
    kernel = septran.compile(split_sum, mapping=_cpu())
    kernel.target = dataclasses.replace(kernel.target, two_kernels=False)  # a target.yaml that does not say it
    with pytest.raises(septran.MappingError, match="runs one kernel per program") as info:
        kernel.specialize(Y=((64,), "float32"), X=((1000, 64), "float32"))
    assert "combine: two_kernels" in _cpu().splitlines()[info.value.loc.line - 1]


def test_a_dynamic_split_dimension_is_refused_at_the_combine_line():
    text = _gpu("sm90") + "dynamic: {X: [0]}\n"  # the rows: the number of slots varies
    kernel = septran.compile(split_sum, mapping=text)
    with pytest.raises(septran.MappingError, match="is not a number") as info:
        kernel.specialize(Y=((64,), "float32"), X=((1000, 64), "float32"))
    assert "combine: two_kernels" in text.splitlines()[info.value.loc.line - 1]
