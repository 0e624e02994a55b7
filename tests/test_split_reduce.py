"""Issue 12: reductions split across programs that add into one output tile (examples/reduce/split_sum.py):
one after another on cpu, atomic adds on GPUs where the mapping says `combine: atomic`, refused otherwise."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import septran
from conftest import needs_nvcc
from support.cuda_tools import nvcc_resource_usage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "reduce"))
from split_sum import split_sum  # noqa: E402

CPU = """target: cpu
entrypoint: split_host
task_mappings:
  split_host:
    task_name: split_sum
    proc: HOST
    mems: {Y: GLOBAL, X: GLOBAL}
    tunables: {BN: 64, BP: 128, BK: 32}
    calls: {split_block: split_block_cpu}
  split_block_cpu:
    task_name: split_block
    proc: BLOCK
    mems: {Y: GLOBAL, X: GLOBAL, acc: LOCAL}
    leaf_task_bindings: {split_start: vector_loops, split_fold: vector_loops, split_add: vector_loops}
"""

GPU = """target: TARGET
entrypoint: split_host
task_mappings:
  split_host:
    task_name: split_sum
    proc: HOST
    mems: {Y: GLOBAL, X: GLOBAL}
    tunables: {BN: 128, BP: 256, BK: 32}
    combine: atomic
    calls: {split_block: split_block_gpu}
  split_block_gpu:
    task_name: split_block
    proc: BLOCK
    threads: 128
    mems: {Y: GLOBAL, X: REGISTER, acc: REGISTER}
    leaf_task_bindings: {split_start: tile_parallel, split_fold: tile_parallel, split_add: global_parallel}
"""


def _mapping(tmp_path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("m, n", [(1001, 333), (128, 64), (7, 5), (2000, 1)])
@pytest.mark.build
def test_split_column_sums_on_cpu_add_one_program_after_another(tmp_path, m, n):
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, CPU))
    x = torch.randn(m, n, generator=torch.Generator().manual_seed(m))
    y = torch.full((n,), 5.0)  # Y is read and written (Y[j] + acc[j]): the kernel adds into the caller's Y
    kernel(y, x)
    torch.testing.assert_close(y.double(), 5.0 + x.double().sum(0), rtol=1e-5, atol=1e-4)
    explained = kernel.explain()
    assert "start from zeros: Y" in explained
    if n > 64:  # several column blocks: they run at once, the row slices (by) in order
        assert "programs run in parallel over bx " in explained


def test_atomic_on_cpu_is_refused_at_the_mappings_line(tmp_path):
    text = CPU.replace("    calls: {split_block", "    combine: atomic\n    calls: {split_block")
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, text))
    with pytest.raises(septran.MappingError, match="no atomic add") as info:
        kernel(torch.zeros(33), torch.randn(300, 33))
    assert "combine: atomic" in text.splitlines()[info.value.loc.line - 1]


def test_an_unknown_combine_is_refused(tmp_path):
    with pytest.raises(septran.MappingError, match="combine must be one of atomic"):
        septran.compile(split_sum, mapping_file=_mapping(tmp_path, CPU.replace(
            "    calls: {split_block", "    combine: two_kernel\n    calls: {split_block")))


@pytest.mark.parametrize("target", ["sm90", "sm80", "gfx942"])
def test_gpu_programs_add_atomically(tmp_path, target):
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, GPU.replace("TARGET", target)))
    variant = kernel.specialize(Y=((4096,), "float32"), X=((1000, 4096), "float32"))
    assert "T.atomic_add(Y[bx * BN + j], acc[j])" in variant.tilelang_source


@pytest.mark.parametrize("target", ["sm90", "sm80"])
def test_gpu_programs_that_share_an_accumulator_without_combine_are_refused(tmp_path, target):
    """A GPU runs every program at once: without `combine: atomic` their additions would race."""
    text = GPU.replace("TARGET", target).replace("    combine: atomic\n", "")
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, text))
    with pytest.raises(septran.LoweringError, match="would race"):
        kernel.specialize(Y=((4096,), "float32"), X=((1000, 4096), "float32"))


@needs_nvcc
@pytest.mark.parametrize("target, arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_atomic_split_builds_with_nvcc(tmp_path, target, arch):
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, GPU.replace("TARGET", target)))
    variant = kernel.specialize(Y=((4096,), "float32"), X=((1000, 4096), "float32"))
    assert "atomicAdd" in variant.device_source or "AtomicAdd" in variant.device_source
    usage = nvcc_resource_usage(variant.device_source, arch)
    assert usage["spill_stores"] == 0, usage


@pytest.mark.parametrize("target", ["sm90", "sm80", "gfx942"])
@pytest.mark.parametrize("n", [4001, 333])
@pytest.mark.build
def test_gpu_atomic_split_of_columns_that_overhang_adds_only_in_bounds(tmp_path, target, n):
    """Y's last tile overhangs: the loop runs over the whole tile (the partial sum is a fragment, which TileLang
    indexes only from a loop of a fixed extent) and each atomic add is guarded; TileLang lowers it."""
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, GPU.replace("TARGET", target)))
    variant = kernel.specialize(Y=((n,), "float32"), X=((1000, n), "float32"))
    assert "for j in T.Parallel(BN):" in variant.tilelang_source
    assert "if bx * BN + j < Y_dim0: T.atomic_add(Y[bx * BN + j], acc[j])" in variant.tilelang_source
    assert f"< {n})" in variant.device_source and "AtomicAdd" in variant.device_source


@needs_nvcc
def test_atomic_split_of_columns_that_overhang_builds_with_nvcc(tmp_path):
    kernel = septran.compile(split_sum, mapping_file=_mapping(tmp_path, GPU.replace("TARGET", "sm90")))
    variant = kernel.specialize(Y=((4001,), "float32"), X=((1000, 4001), "float32"))
    usage = nvcc_resource_usage(variant, "sm_90a")
    assert usage["spill_stores"] == 0, usage
