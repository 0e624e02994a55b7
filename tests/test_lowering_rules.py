"""Lowering rules beyond the seed mapping: sub-tiles, accumulator dtype, random tunables."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, assert_gemm_close, first_point_text, mapping_path

pytestmark = pytest.mark.build  # 3 of its 4 tests build kernels

CASES = Path(__file__).resolve().parent / "logic_cases"

SPLIT_MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: host
    proc: HOST
    tunables: {{BM: {bm}, BN: 16, SM: {sm}}}
    calls: {{block: blk}}
  blk:
    task_name: block
    proc: BLOCK
    mems: {{C: LOCAL, A: LOCAL, B: LOCAL}}
    leaf_task_bindings: {{leaf: gemm_leaf_cpu}}
"""


def _mapping(tmp_path, text: str, name="m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sub_tiles_are_staged_inside_the_loop_that_moves_them(tmp_path):
    kernel = septran.compile(logic_file=CASES / "split_tile.py", mapping_file=_mapping(tmp_path, SPLIT_MAPPING.format(bm=32, sm=8)))
    a, b = torch.randn(70, 20), torch.randn(20, 45)
    assert_gemm_close(kernel(a, b), a, b)
    src = kernel.tilelang_source
    body = src[src.index("for s in"):]
    # C's sub-tile moves with s: cleared, computed and stored inside the loop; B does not move: loaded before it.
    assert 'septran_cpu_fill_zero_f32", C_local.access_ptr' in body and 'septran_cpu_store_f32_f32", C.access_ptr(' in body
    assert 'septran_cpu_load_f32_f32", B_local.access_ptr' in src[:src.index("for s in")]


def test_a_sub_tile_must_divide_its_tile(tmp_path):
    mapping = _mapping(tmp_path, SPLIT_MAPPING.format(bm=32, sm=12))
    kernel = septran.compile(logic_file=CASES / "split_tile.py", mapping_file=mapping)
    with pytest.raises(septran.LoweringError, match="tile SM = 12 does not divide the 32 elements") as info:
        kernel.specialize(A=((64, 16), "float32"), B=((16, 32), "float32"))
    assert info.value.loc.file == str(CASES / "split_tile.py")
    assert "# <- split" in str(info.value)


def test_accum_dtype_sets_the_accumulator(tmp_path):
    text = first_point_text("cpu").replace("    proc: BLOCK\n", "    proc: BLOCK\n    accum_dtype: float16\n")
    text = text.replace("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: LOCAL, A: LOCAL, B: LOCAL}").replace("gemm_leaf_blas", "gemm_leaf_cpu")
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=_mapping(tmp_path, text))
    a, b = torch.randn(40, 64).half(), torch.randn(64, 24).half()
    c = kernel(a, b)
    assert 'C_local = T.alloc_local((BM, BN), "float16")' in kernel.tilelang_source
    ref = a.double() @ b.double()
    assert (c.double() - ref).abs().max() < 0.25  # fp16 accumulation: close, but not fp32-close


@pytest.mark.parametrize("seed", range(4))
def test_random_tunables_and_shapes(tmp_path, seed):
    rng = random.Random(seed)
    bm, bn, bk = (rng.choice([8, 16, 32, 64]) for _ in range(3))
    text = first_point_text("cpu").replace("tunables: {BM: 256, BN: 256, BK: 512}", f"tunables: {{BM: {bm}, BN: {bn}, BK: {bk}}}")
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=_mapping(tmp_path, text))
    M, N, K = (rng.randint(1, 150) for _ in range(3))
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen)
    assert_gemm_close(kernel(a, b), a, b)
