"""Halos: the mapping's `halo: {X: [0, 1]}` stages a tile with its neighbours' elements (0 past the tensor's ends),
so that a stencil tiled across the dimension it reaches along reads them; without it the read is refused."""
from __future__ import annotations

import inspect

import pytest
import torch

import septran
from septran import task

HERE = __file__

MAPPING = """
target: {target}
entrypoint: host
task_mappings:
  host: {{task_name: host, proc: HOST, mems: {{Y: GLOBAL, X: GLOBAL}}, tunables: {{BM: {bm}, BN: {bn}}}, calls: {{tiles: blk}}}}
  blk: {{task_name: tiles, proc: BLOCK, mems: {{Y: {ymem}, X: {xmem}}}, {halo}{extra}leaf_task_bindings: {{stencil: {leaf}}}}}
"""


@task.define(leaf=True)
def stencil(Y, X):
    task.compute(Y, lambda i, j: X[i, j - 1] + X[i, j] + X[i, j + 1])


@task.define
def tiles(Y, X):
    task.launch(stencil, Y, X)


@task.define
def host(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(tiles, Yp[i, j], Xp[i, j])


def _mapping(halo="halo: {X: [0, 1]}, ", xmem="LOCAL", ymem="LOCAL", bm=4, bn=5, target="cpu", leaf="vector_loops"):
    extra = "threads: 128, " if target != "cpu" else ""
    return MAPPING.format(target=target, bm=bm, bn=bn, xmem=xmem, ymem=ymem, halo=halo, leaf=leaf, extra=extra)


def _reference(x):
    p = torch.nn.functional.pad(x, (1, 1))
    return p[:, :-2] + p[:, 1:-1] + p[:, 2:]


@pytest.mark.parametrize("xmem", ["LOCAL", "GLOBAL"])
@pytest.mark.parametrize("shape,bm,bn", [((7, 13), 4, 5), ((5, 1), 2, 3), ((3, 11), 3, 11), ((6, 9), 4, 2), ((1, 17), 1, 4)])
@pytest.mark.build
def test_stencil_with_a_halo_computes_right(xmem, shape, bm, bn):
    kernel = septran.compile(host, mapping=_mapping(xmem=xmem, bm=bm, bn=bn))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[1]), dtype=torch.float32)
    torch.testing.assert_close(kernel(x), _reference(x))


@pytest.mark.build
def test_pairs_and_float16():
    kernel = septran.compile(host, mapping=_mapping(halo="halo: {X: [0, [1, 1]]}, "))
    x = torch.randn(9, 23, generator=torch.Generator().manual_seed(1)).to(torch.float16)
    torch.testing.assert_close(kernel(x), _reference(x.float()).to(torch.float16), atol=2e-3, rtol=2e-3)


def test_without_a_halo_the_read_is_refused():
    lines, start = inspect.getsourcelines(stencil)
    with pytest.raises(septran.LoweringError) as info:
        septran.compile(host, mapping=_mapping(halo=""))(torch.randn(7, 13))
    err = info.value
    assert (err.loc.file, err.loc.line) == (HERE, start + 2), str(err)
    assert "reads X at -1..3 along dimension 1" in str(err) and "halo" in str(err.hint)


def test_a_halo_too_small_is_refused_with_the_numbers():
    with pytest.raises(septran.LoweringError) as info:
        septran.compile(host, mapping=_mapping(halo="halo: {X: [0, [1, 0]]}, "))(torch.randn(7, 13))
    assert "a halo of 1 before and 0 after (-1..4)" in str(info.value)


def _mapping_error(halo: str):
    with pytest.raises(septran.MappingError) as info:
        septran.compile(host, mapping=_mapping(halo=halo))(torch.randn(7, 13))
    return info.value


def test_the_key_is_checked_at_its_line():
    err = _mapping_error("halo: {Z: [0, 1]}, ")
    assert "blk.halo names 'Z'" in str(err) and err.loc.line == 6
    err = _mapping_error("halo: {X: [0, -1]}, ")
    assert "blk.halo.X[1] must be an integer from 0" in str(err) and err.loc.line == 6
    err = _mapping_error("halo: {X: [1]}, ")
    assert "has 1 entries, but the tile of X has 2 dimensions" in str(err) and err.loc.line == 6
    err = _mapping_error("halo: {X: [0, [1, 2, 3]]}, ")
    assert "[before, after] pair" in str(err)
    err = _mapping_error("halo: {Y: [0, 1]}, ")
    assert "writes Y" in str(err)


@pytest.mark.parametrize("target", ["sm90", "sm80"])
@pytest.mark.build
def test_gpu_source_generates(target):
    kernel = septran.compile(host, mapping=_mapping(target=target, xmem="SHARED", ymem="REGISTER", bm=16, bn=32,
                                                    leaf="tile_parallel"))
    variant = kernel.specialize(X=((33, 70), "float16"))
    src = variant.tilelang_source
    assert "T.alloc_shared((BM, BN + 2)" in src and "T.if_then_else" in src, src
    assert "__global__" in variant.device_source  # TileLang lowers it to CUDA
