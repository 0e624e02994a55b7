"""task.parallel_range inside a program: loops in one order on cpu; on GPUs (`parallel_in_program: true`) a nest
around one element compute that stores its own elements becomes T.Parallel (lowering/parallel_loops.py), and
anything else stays loops, explain() saying why."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import needs_nvcc
from septran import task
from support.cuda_tools import nvcc_resource_usage


@task.define(leaf=True)
def scale_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * 3.0)


@task.define
def scale_block(Y, X):
    Xp = task.partition(X, by="blocks", tile=("BS", "BS"))
    Yp = task.partition(Y, by="blocks", tile=("BS", "BS"))
    for i, j in task.parallel_range(Yp.shape):  # inside a program
        task.launch(scale_leaf, Yp[i, j], Xp[i, j])


@task.define
def scale_logic(Y, X):
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(scale_block, Yp[i, j], Xp[i, j])


def _mapping(target="cpu", mem="GLOBAL", leaf="vector_loops", bs=16, extra=""):
    return f"""
target: {target}
entrypoint: host
task_mappings:
  host:
    task_name: scale_logic
    proc: HOST
    mems: {{"*": GLOBAL}}
    tunables: {{BM: 32, BN: 64, BS: {bs}}}
    calls: {{scale_block: blk}}
  blk:
    task_name: scale_block
    proc: BLOCK{extra}
    mems: {{"*": {mem}}}
    leaf_task_bindings: {{scale_leaf: {leaf}}}
"""


@pytest.mark.parametrize("shape", [(70, 150), (32, 64), (1, 5)])
@pytest.mark.parametrize("mem,leaf", [("GLOBAL", "vector_loops"), ("LOCAL", "tile_loops")])
@pytest.mark.build
def test_cpu_matches_torch(shape, mem, leaf):
    x = torch.randn(*shape)
    assert torch.equal(septran.compile(scale_logic, mapping=_mapping(mem=mem, leaf=leaf))(x), x * 3.0)


def test_inner_range_is_loops_and_the_grid_stays_parallel():
    src = septran.compile(scale_logic, mapping=_mapping()).specialize(X=((70, 150), "float32")).tilelang_source
    assert "for i in T.serial(T.ceildiv(BM, BS)):" in src and "for j in T.serial(T.ceildiv(BN, BS)):" in src
    assert "programs run in parallel over bx, by" in src  # the inner loops stay inside each program's tile


def test_a_tile_that_does_not_divide_is_refused():
    with pytest.raises(septran.LoweringError, match="does not divide"):
        septran.compile(scale_logic, mapping=_mapping(bs=24)).specialize(X=((70, 150), "float32"))


@pytest.mark.build
def test_sm90_source():
    m = _mapping("sm90", "REGISTER", "tile_parallel", extra="\n    threads: 128")
    v = septran.compile(scale_logic, mapping=m).specialize(X=((70, 150), "float16"))
    assert "T.serial(T.ceildiv(BM, BS))" in v.tilelang_source and "__global__" in v.device_source


GPU_ARCH = {"sm90": "sm_90a", "sm80": "sm_80"}


def _gpu(target, mem="GLOBAL", leaf="global_parallel"):
    return _mapping(target, mem, leaf, extra="\n    threads: 128")


@pytest.mark.parametrize("target", ["sm90", "sm80", "gfx942"])
@pytest.mark.build
def test_gpu_element_nest_is_t_parallel(target):
    """Y's tiles read and written in place in global memory: the nest holds one element compute, each (i, j)
    stores its own BS x BS box, so T.Parallel; the tile overhangs (70 x 150), so the store is guarded."""
    v = septran.compile(scale_logic, mapping=_gpu(target)).specialize(X=((70, 150), "float16"))
    src = v.tilelang_source
    assert "for i in T.Parallel(T.ceildiv(BM, BS)):" in src and "for j in T.Parallel(T.ceildiv(BN, BS)):" in src
    assert "for i_2, j_2 in T.Parallel(BS, BS):" in src
    assert "if by * BM + i * BS + i_2 < X_dim0 and bx * BN + j * BS + j_2 < X_dim1: Y[" in src
    assert "__global__" in v.device_source  # TileLang lowers it (one fused loop over the threads)
    explained = v.explain()
    assert "loop i in 0..ceildiv(BM, BS) (parallel)" in explained
    assert "as T.Parallel: each iteration stores its own elements of Y" in explained


def test_gpu_element_nest_that_divides_needs_no_guard():
    src = septran.compile(scale_logic, mapping=_gpu("sm90")).specialize(X=((64, 128), "float32")).tilelang_source
    assert "for j in T.Parallel(T.ceildiv(BN, BS)):" in src and " if " not in src


@pytest.mark.parametrize("target", ["sm90", "sm80"])
def test_gpu_nest_with_copies_stays_loops_and_says_why(target):
    v = septran.compile(scale_logic, mapping=_gpu(target, "REGISTER", "tile_parallel")).specialize(
        X=((70, 150), "float16"))
    assert "for i in T.serial(T.ceildiv(BM, BS)):" in v.tilelang_source and "T.copy(" in v.tilelang_source
    assert "not T.Parallel, since its body holds 3 statements (a copy (T.copy)" in v.explain()


@task.define
def first_tile_block(Y, X):  # every j adds its tile into Y's tile (i, 0): iterations share a store
    Xp = task.partition(X, by="blocks", tile=("BS", "BS"))
    Yp = task.partition(Y, by="blocks", tile=("BS", "BS"))
    for i, j in task.parallel_range(Xp.shape):
        task.launch(add_leaf, Yp[i, 0], Xp[i, j])


@task.define(leaf=True)
def add_leaf(Y, X):
    task.compute(Y, lambda i, j: Y[i, j] + X[i, j])


@task.define
def first_tile_logic(Y, X):
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    Yp = task.partition(Y, by="blocks", tile=("BM", "BS"))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(first_tile_block, Yp[i, 0], Xp[i, 0])


def test_gpu_nest_whose_iterations_share_a_store_stays_loops():
    m = _gpu("sm90").replace("scale_logic", "first_tile_logic").replace("scale_block", "first_tile_block").replace(
        "scale_leaf", "add_leaf").replace("BN: 64", "BN: 32")
    v = septran.compile(first_tile_logic, mapping=m).specialize(Y=((64, 16), "float32"), X=((64, 32), "float32"))
    assert "for j in T.serial(" in v.tilelang_source
    assert "two iterations of j may store into one element of Y (not proved apart)" in v.explain()


@needs_nvcc
@pytest.mark.parametrize("target", ["sm90", "sm80"])
def test_gpu_element_nest_builds_with_nvcc(target):
    v = septran.compile(scale_logic, mapping=_gpu(target)).specialize(X=((70, 150), "float16"))
    usage = nvcc_resource_usage(v, GPU_ARCH[target])
    assert usage["spill_stores"] == 0, usage


@task.define
def sub_tiles(Y, X):  # the program's whole tiles, cut again: a parallel_range over sub-tiles of fragments
    Xp = task.partition(X, by="blocks", tile=("BS", "BS"))
    Yp = task.partition(Y, by="blocks", tile=("BS", "BS"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(scale_leaf, Yp[i, j], Xp[i, j])


@task.define
def staged_block(Y, X):
    task.launch(sub_tiles, Y, X)


@task.define
def staged_logic(Y, X):
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(staged_block, Yp[i, j], Xp[i, j])


def _staged(target, mem, leaf, threads=""):
    return f"""
target: {target}
entrypoint: host
task_mappings:
  host:
    task_name: staged_logic
    proc: HOST
    mems: {{"*": GLOBAL}}
    tunables: {{BM: 64, BN: 64, BS: 16}}
    calls: {{staged_block: b}}
  b:
    task_name: staged_block
    proc: BLOCK{threads}
    mems: {{"*": {mem}}}
    calls: {{sub_tiles: s}}
  s:
    task_name: sub_tiles
    proc: BLOCK
    mems: {{"*": {mem}}}
    leaf_task_bindings: {{scale_leaf: {leaf}}}
"""


@pytest.mark.build
def test_gpu_element_nest_over_fragments_is_t_parallel():
    v = septran.compile(staged_logic, mapping=_staged("sm90", "REGISTER", "tile_parallel", "\n    threads: 128")).specialize(
        X=((70, 150), "float32"))
    src = v.tilelang_source
    assert "for i in T.Parallel(T.ceildiv(BM, BS)):" in src and "Y_local[i * 16 + i_2, j * 16 + j_2] = " in src
    assert "__global__" in v.device_source


@needs_nvcc
def test_gpu_element_nest_over_fragments_builds_with_nvcc():
    v = septran.compile(staged_logic, mapping=_staged("sm90", "REGISTER", "tile_parallel", "\n    threads: 128")).specialize(
        X=((70, 150), "float32"))
    assert nvcc_resource_usage(v, "sm_90a")["spill_stores"] == 0


@pytest.mark.build
def test_cpu_sub_tiles_of_a_staged_tile_match_torch():
    x = torch.randn(70, 150)
    assert torch.equal(septran.compile(staged_logic, mapping=_staged("cpu", "LOCAL", "tile_loops"))(x), x * 3.0)
