"""task.parallel_range inside a program: its iterations run in one order (loops), on every target."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task


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


def test_sm90_source():
    m = _mapping("sm90", "REGISTER", "tile_parallel", extra="\n    threads: 128")
    v = septran.compile(scale_logic, mapping=m).specialize(X=((70, 150), "float16"))
    assert "T.serial(T.ceildiv(BM, BS))" in v.tilelang_source and "__global__" in v.device_source
