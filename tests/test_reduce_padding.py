"""A row reduction by a leaf that reduces whole tiles (TileLang's ``T.reduce_*``) over a tile staged from one that
overhangs its tensor is refused at the binding (septran/lowering/leaf_calls.py): the zeros the load wrote past
the tensor's end, or the exps computed from them, would be summed. Found on sm90 with the CPU's exp-once softmax
(its row primitives reduce X and Y in place): 257 columns in 512-wide fragments lowered to a softmax whose sums
counted 255 padded columns, silently wrong. The CPU's vector leaves take the in-bounds extent and stay right."""
from __future__ import annotations

import pytest

import septran
from conftest import forbid_tilelang

MAPPING = """target: sm90
entrypoint: softmax_host
task_mappings:
  softmax_host:
    task_name: softmax_cached_logic
    proc: HOST
    mems: {Y: GLOBAL, X: GLOBAL}
    tunables: {BM: 4, BN: 512}
    calls: {softmax_cached_rows: softmax_block}
  softmax_block:
    task_name: softmax_cached_rows
    proc: BLOCK
    threads: 128
    mems: {Y: REGISTER, X: REGISTER, m: REGISTER, l: REGISTER, s: REGISTER, S: REGISTER}
    leaf_task_bindings: {softmax_cached_start: tile_parallel, softmax_cached_max: tile_parallel, softmax_cached_exp: tile_parallel, softmax_cached_norm: tile_parallel, softmax_cached_write: tile_parallel}
"""


@pytest.fixture
def kernel(tmp_path):
    from septran.ops.logic import softmax as logic
    path = tmp_path / "softmax_cached_sm90.yaml"
    path.write_text(MAPPING)
    return septran.compile(logic.softmax_cached_logic, mapping_file=path), path


def test_a_whole_tile_reduction_over_padding_is_refused_at_the_binding(kernel, monkeypatch):
    k, path = kernel
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.LoweringError, match=r"tile_parallel reduces X's whole 4x512 tile, which may reach past "
                                                    r"the end of the tensor") as info:
        k.specialize(X=((3, 257), "float16"))
    assert "leaf_task_bindings" in path.read_text().splitlines()[info.value.loc.line - 1]
    assert "task.where(inside, x, -inf)" in info.value.hint


def test_tiles_that_divide_the_rows_lower(kernel):
    k, _ = kernel
    src = k.specialize(X=((3, 1024), "float16")).tilelang_source  # rows past the end (3 of 4) are never stored
    assert "T.reduce_max(X_local, m, dim=1" in src
