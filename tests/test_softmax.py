"""Softmax and log-softmax (examples/softmax): numerics on the CPU, generated code for every target."""
from __future__ import annotations


import pytest
import torch

import septran
from conftest import SOFTMAX_WITHOUT_TEMPS, REPO, assert_flash_rule, edited_mapping, load_module, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

logic = load_module(REPO / "examples" / "softmax" / "softmax.py")

KERNELS: dict = {}


def kernel(log: bool, target: str = "cpu"):
    key = (log, target)
    if key not in KERNELS:
        KERNELS[key] = septran.compile(logic.softmax(log), mapping_file=mapping_path(target, "softmax"))
    return KERNELS[key]


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("rows,cols", [(7, 1), (33, 1000), (5, 4097)])
@pytest.mark.build
def test_cpu_matches_torch(log, dtype, rows, cols):
    """Rows of one column, of less than one tile... and of 4097: more than one tile, the last overhanging."""
    fn = torch.log_softmax if log else torch.softmax
    x = (3 * torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * cols))).to(dtype)
    out = kernel(log)(x)
    assert out.dtype == dtype and out.shape == x.shape
    assert_flash_rule(out, fn(x.float(), dim=-1), fn(x, dim=-1), f"{rows}x{cols} {dtype}")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("cols", [257, 1500, 1024])
@pytest.mark.build
def test_rows_staged_on_chip_reduce_only_their_part_inside_the_tensor(tmp_path, log, cols):
    """X and Y staged in LOCAL 1024-wide tiles over rows of 257 or 1500 (the last tile overhangs): the row maximum
    and sum read the staged tiles' in-bounds part, not the load's zero padding (the rows summed to 0.01 before)."""
    path = edited_mapping(tmp_path, "cpu", "softmax", ("mems: {Y: GLOBAL, X: GLOBAL, m: LOCAL", "mems: {Y: LOCAL, X: LOCAL, m: LOCAL"))
    k = septran.compile(logic.softmax(log), mapping_file=path)
    x = torch.randn(5, cols, generator=torch.Generator().manual_seed(cols)) - 5  # all negative: a padding 0 would be the max
    fn = torch.log_softmax if log else torch.softmax
    out = k(x)
    src = k.latest.tilelang_source  # (softmax: Y's tile of exps in X's buffer, computed over the row: reuse_buffers)
    assert "X_local = T.alloc" in src and ("Y_local = T.alloc" in src or "# then Y's, computed in place" in src)
    assert_flash_rule(out, fn(x.double(), dim=-1), fn(x, dim=-1), f"5x{cols}")


@pytest.mark.build
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_cpu_output_passed_full_of_nan_is_written_whole(log):
    """Y is written with the exps, tile by tile, before the scaling pass reads it (lowering/writes.py: an earlier
    loop over the same tiles wrote it): the runtime no longer zero-fills it at each call, and an output passed
    full of NaN comes back right. 9000 columns: nine 1024-wide tiles, the last overhanging."""
    fn = torch.log_softmax if log else torch.softmax
    x = 3 * torch.randn(3, 9000, generator=torch.Generator().manual_seed(9))
    y = torch.full_like(x, float("nan"))
    kernel(log)(x, Y=y)
    assert not kernel(log).latest.program.read_outputs
    assert_flash_rule(y, fn(x.double(), dim=-1).float(), fn(x, dim=-1), "3x9000 into NaN")


@pytest.mark.build
def test_large_values_do_not_overflow():
    """The running maximum keeps exp() in range where a naive softmax overflows."""
    x = torch.randn(4, 600, generator=torch.Generator().manual_seed(1)) * 30 + 500
    assert_flash_rule(kernel(False)(x), torch.softmax(x, -1), torch.softmax(x, -1))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_softmax_matches_golden(target, golden):
    dtype = "float32" if target == "cpu" else "float16"
    golden(f"softmax.{target}.py", kernel(False, target).specialize(X=((1000, 4097), dtype)).tilelang_source)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_cubin_has_no_spills(target, arch, log):
    variant = kernel(log, target).specialize(X=((1000, 4097), "float16"))
    usage = nvcc_resource_usage(variant, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


@needs_nvcc
@pytest.mark.slow
def test_an_answer_found_by_build_key_is_the_one_of_its_device_source():
    """support/cuda_tools.py finds a variant's recorded nvcc answer by its build key, without TileLang's lowering:
    here the device source is lowered and its own record (or nvcc) gives the same answer."""
    variant = kernel(False, "sm80").specialize(X=((1000, 4097), "float16"))
    assert nvcc_resource_usage(variant, "sm_80") == nvcc_resource_usage(variant.device_source, "sm_80")


@pytest.mark.build
def test_compute_indices_never_shadow_the_programs_names(tmp_path):
    """A compute's `lambda i, j` inside `for j in task.range(...)`: the loop over elements gets other names,
    so `global_index(X, 1, j)` still means the tile's start plus the element's column."""
    from septran import task

    @task.define(leaf=True)
    def shift(Y, X):
        task.compute(Y, lambda i, j: task.where(task.global_index(X, 1, j) < task.global_size(X, 1), X[i, j] + 1.0, 0.0))

    @task.define
    def softmax_rows(Y, X):
        Xp = task.partition(X, by="blocks", tile=(None, "BN"))
        Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
        for j in task.range(Xp.shape[1]):
            task.launch(shift, Yp[0, j], Xp[0, j])

    @task.define
    def softmax_logic(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(softmax_rows, Yp[i, 0], Xp[i, 0])

    path = edited_mapping(tmp_path, "cpu", "softmax_online", SOFTMAX_WITHOUT_TEMPS,
                          ("{softmax_start: vector_loops, softmax_stats: vector_loops, softmax_write: vector_loops}", "{shift: vector_loops}"))
    kern = septran.compile(softmax_logic, mapping_file=path)
    x = torch.randn(5, 1600)  # two column tiles of 1024: the loop over them stays a loop
    assert torch.equal(kern(x), x + 1.0)
    src = kern.tilelang_source
    assert "for j in T.serial(" in src and "for i, j_2 in T.grid(" in src
    assert "j * BN + j_2 < X_dim1" in src


@pytest.mark.parametrize("BM,BN", [(1, 1), (3, 7), (8, 64)])
@pytest.mark.build
def test_any_tile_sizes(tmp_path, BM, BN):
    """Tiles that divide nothing: rows and columns overhang in every combination, and the masks hold."""
    path = edited_mapping(tmp_path, "cpu", "softmax", ("{BM: 1, BN: 1024}", f"{{BM: {BM}, BN: {BN}}}"))
    kern = septran.compile(logic.softmax(True), mapping_file=path)
    gen = torch.Generator().manual_seed(BM * 100 + BN)
    for rows, cols in [(5, 13), (2, 130)]:
        x = torch.randn(rows, cols, generator=gen) * 4
        assert_flash_rule(kern(x), torch.log_softmax(x, -1), torch.log_softmax(x, -1), f"{rows}x{cols} BM={BM} BN={BN}")
