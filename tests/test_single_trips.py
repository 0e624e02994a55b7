"""A serial loop of one trip is its body (septran/lowering/single_trips.py): its regions stage once.

LayerNorm walks a row's column tiles three times (mean, squared deviations, output). Where the row fits in one
tile each walk is one trip, and before this each staged its own copy of the row: a float16 X was read and widened
three times a row. Loops of more trips, and those whose count depends on a dynamic size, stay loops.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, load_module, mapping_path

LN = load_module(REPO / "examples" / "layernorm" / "layernorm.py")


@pytest.fixture(scope="module")
def layernorm():
    return septran.compile(LN.layernorm_logic, mapping_file=mapping_path("cpu", "layernorm"))


def _loads_of_x(src: str) -> int:
    return sum(1 for line in src.splitlines() if "septran_cpu_load_f32_f16" in line and "&(X[" in line)


@pytest.mark.build
def test_a_row_in_one_tile_is_staged_once_for_every_pass(layernorm):
    # a float32 weight and a float16 bias beside float16 rows: the staged path (rows whose weight and bias share a
    # type, theirs or float32, read X in place instead)
    x, w, b = torch.randn(5, 768).half(), torch.randn(768), torch.randn(768).half()
    layernorm(x, w, b)
    assert _loads_of_x(layernorm.latest.device_source) == 1  # was 3: one per pass (the passes are two now)
    assert "T.serial" not in layernorm.latest.tilelang_source  # the two walks over one column tile are no loops


def test_a_row_of_several_tiles_keeps_its_loops(layernorm):
    tl = layernorm.specialize(X=((5, 9000), "float16"), W=((9000,), "float16"), B=((9000,), "float16")).tilelang_source
    assert tl.count("T.serial(") >= 2  # the statistics, the output


@pytest.mark.build
@pytest.mark.parametrize("cols", [1, 768, 1024, 4104, 4105])
def test_layernorm_with_and_without_its_loops_is_right(layernorm, cols):
    gen = torch.Generator().manual_seed(cols)
    x = (torch.randn(3, cols, generator=gen) * 3 + 1).half()
    w, b = torch.randn(cols, generator=gen).half(), torch.randn(cols, generator=gen).half()
    ln = torch.nn.functional.layer_norm
    assert_flash_rule(layernorm(x, w, b), ln(x.double(), (cols,), w.double(), b.double()), ln(x, (cols,), w, b))
