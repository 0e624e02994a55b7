"""Parallel grids of any rank: the dimensions before the last two share blockIdx.z (septran/lowering/grid_fold.py)."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from septran.expr import Const, Sym, Var, evaluate
from septran.lowering.grid_fold import fold


@task.define(leaf=True)
def axpy_leaf(C, A, B):
    task.compute(C, lambda i, j, k, l: A[i, j, k, l] + B[i, j, k, l] * 2.0)


@task.define
def axpy_block(C, A, B):
    task.launch(axpy_leaf, C, A, B)


@task.define
def axpy4_logic(C, A, B):
    tile = (1, 1, "BM", "BN")
    Cp = task.partition(C, by="blocks", tile=tile)
    Ap = task.partition(A, by="blocks", tile=tile)
    Bp = task.partition(B, by="blocks", tile=tile)
    for i, j, k, l in task.parallel_range(Cp.shape):  # four grid dimensions
        task.launch(axpy_block, Cp[i, j, k, l], Ap[i, j, k, l], Bp[i, j, k, l])


@task.define(leaf=True)
def bmm_leaf(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def bmm_block(C, A, B):
    task.launch(bmm_leaf, C, A, B)


@task.define
def bmm4_logic(C, A, B):  # C[g, h] = A[g, h] @ B[h]: B broadcast over g
    Cp = task.partition(C, by="blocks", tile=(1, 1, "BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=(1, 1, "BM", None))
    Bp = task.partition(B, by="blocks", tile=(1, None, "BN"))
    for g, h, i, j in task.parallel_range(Cp.shape):
        task.launch(bmm_block, Cp[g, h, i, j], Ap[g, h, i, 0], Bp[h, 0, j])


def _mapping(entry: str, block: str, leaf: str, binding: str, tunables: str) -> str:
    return f"""
target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: {entry}
    proc: HOST
    mems: {{"*": GLOBAL}}
    tunables: {tunables}
    calls: {{{block}: blk}}
  blk:
    task_name: {block}
    proc: BLOCK
    mems: {{"*": LOCAL}}
    leaf_task_bindings: {{{leaf}: {binding}}}
"""


AXPY = _mapping("axpy4_logic", "axpy_block", "axpy_leaf", "tile_loops", "{BM: 4, BN: 16}")


def test_fold_recovers_every_index():
    syms = iter(Sym(n) for n in ("a", "b", "c", "d", "e"))
    grid, loops, folded = fold(["v0", "v1", "v2", "v3", "v4"], [Const(n) for n in (2, 3, 5, 7, 11)], lambda k: next(syms))
    (bz, extent), = [(s, e) for s, e in grid if s in dict(folded)]
    assert extent == Const(30) and len(grid) == 3
    seen = set()
    for z in range(30):
        seen.add(tuple(evaluate(loops[v], {Var(bz): z}) for v in ("v0", "v1", "v2")))
    assert seen == {(a, b, c) for a in range(2) for b in range(3) for c in range(5)}


def test_three_or_fewer_dimensions_are_not_folded():
    syms = iter(Sym(n) for n in ("bx", "by", "bz"))
    grid, loops, folded = fold(["i", "j", "k"], [Const(2), Const(3), Const(4)], lambda k: next(syms))
    assert folded == () and [e.value for _, e in grid] == [4, 3, 2]


@pytest.mark.parametrize("shape", [(3, 5, 7, 33), (1, 2, 1, 5), (4, 1, 9, 16)])
@pytest.mark.build
def test_4d_elementwise_on_cpu(shape):
    a, b = torch.randn(*shape), torch.randn(*shape)
    assert torch.equal(septran.compile(axpy4_logic, mapping=AXPY)(a, b), a + b * 2.0)


def test_4d_grid_folds_into_bz_and_runs_in_parallel():
    v = septran.compile(axpy4_logic, mapping=AXPY).specialize(A=((3, 5, 7, 33), "float32"), B=((3, 5, 7, 33), "float32"))
    assert "T.Kernel(T.ceildiv(A_dim3, BN), T.ceildiv(A_dim2, BM), A_dim1 * A_dim0)" in v.tilelang_source
    assert "bz % A_dim1" in v.tilelang_source and "bz // A_dim1" in v.tilelang_source
    assert "programs run in parallel over bx, by, bz" in v.tilelang_source


@pytest.mark.build
def test_4d_broadcast_batched_matmul_on_cpu():
    mapping = _mapping("bmm4_logic", "bmm_block", "bmm_leaf", "gemm_leaf_cpu", "{BM: 16, BN: 16}")
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 4, 20, 12, generator=gen), torch.randn(4, 12, 24, generator=gen)
    out = septran.compile(bmm4_logic, mapping=mapping)(a, b)
    assert out.shape == (3, 4, 20, 24)
    assert (out.double() - a.double() @ b.double()).abs().max().item() < 1e-4


@pytest.mark.build
def test_4d_grid_on_sm90_builds_source():
    from conftest import REPO
    sm90 = AXPY.replace("target: cpu", "target: sm90").replace("LOCAL", "REGISTER").replace("tile_loops", "tile_parallel")
    sm90 = sm90.replace("proc: BLOCK", "proc: BLOCK\n    threads: 128")
    v = septran.compile(axpy4_logic, mapping=sm90).specialize(A=((3, 5, 7, 33), "float16"), B=((3, 5, 7, 33), "float16"))
    assert "blockIdx.z" in v.device_source and REPO
