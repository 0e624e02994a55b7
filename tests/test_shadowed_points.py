"""``shape_points`` entries that can never act are refused at their line (septran/mapping/shadowed_points.py).

The cpu RMSNorm mapping shipped one: a bucket for bfloat16 rows of at most 2048 below the entry for every bfloat16
X, which set the same tile first, so no row ran the bucket's tile.
"""
from __future__ import annotations

import glob

import pytest

from conftest import REPO
from septran.errors import MappingError
from septran.mapping.schema import parse_mapping
from septran.mapping.yaml_source import read_mapping_text
from test_shape_points import SPACE

BM = "gemm_host.tunables.BM"


def _entries(*lines: str) -> str:
    return SPACE + "shape_points:\n" + "".join(f"  - {line}\n" for line in lines)


@pytest.mark.parametrize("lines,message,line", [
    # RMSNorm's: the narrower bucket below the entry for its whole type, which sets BM first
    (("{dtypes: {A: bfloat16}, continue: true, point: {%s: 64}}" % BM,
      "{when: {A: [null, 2048]}, dtypes: {A: bfloat16}, continue: true, point: {%s: 16}}" % BM),
     "this entry sets nothing: entries above it .* set gemm_host.tunables.BM first", 17),
    # two entries above it set one dimension each, and it sets both
    (("{threads: 2, continue: true, point: {%s: 64}}" % BM,
      "{when: {A: [512]}, continue: true, point: {gemm_host.tunables.BN: 16}}",
      "{when: {A: [256]}, threads: 1, point: {%s: 16, gemm_host.tunables.BN: 64}}" % BM),
     "sets nothing", 18),
    # an entry without `continue` above it that holds wherever it does: no call reaches it
    (("{when: {A: [64]}, point: {%s: 64}}" % BM, "{when: {A: [16]}, above: {A: [8]}, point: {%s: 16}}" % BM),
     "no call reaches this entry: the entry at line 16 holds for every call", 17),
    (("{cpu_flags: [avx512f], point: {%s: 64}}" % BM, "{cpu_flags: [avx512f, amx_bf16], point: {%s: 16}}" % BM),
     "no call reaches", 17),
    (("{ranks: {A: 2}, point: {%s: 64}}" % BM, "{ranks: {A: 2}, dtypes: {A: bfloat16}, point: {%s: 16}}" % BM),
     "no call reaches", 17),
    (("{numel: {A: 5000}, point: {%s: 64}}" % BM, "{numel: {A: 4000}, point: {%s: 16}}" % BM), "no call reaches", 17),
])
def test_an_entry_that_can_never_act_is_refused_at_its_line(lines, message, line):
    with pytest.raises(MappingError, match=message) as err:
        parse_mapping(_entries(*lines), "m.yaml")
    assert (err.value.loc.file, err.value.loc.line) == ("m.yaml", line)
    assert "move this entry above" in err.value.hint


@pytest.mark.parametrize("lines", [
    # the narrower bucket first: RMSNorm's order now
    ("{when: {A: [null, 2048]}, dtypes: {A: bfloat16}, continue: true, point: {%s: 16}}" % BM,
     "{dtypes: {A: bfloat16}, continue: true, point: {%s: 64}}" % BM),
    # the entry above holds for only some of its calls: other types, looser or missing bounds below, other makers
    ("{dtypes: {A: float16}, continue: true, point: {%s: 64}}" % BM, "{dtypes: {A: bfloat16}, point: {%s: 16}}" % BM),
    ("{when: {A: [16]}, point: {%s: 64}}" % BM, "{when: {A: [64]}, point: {%s: 16}}" % BM),
    ("{when: {A: [16]}, point: {%s: 64}}" % BM, "{threads: 1, point: {%s: 16}}" % BM),
    ("{above: {A: [64]}, point: {%s: 64}}" % BM, "{above: {A: [16]}, point: {%s: 16}}" % BM),
    ("{cpu_vendor: GenuineIntel, point: {%s: 64}}" % BM, "{threads: 1, point: {%s: 16}}" % BM),
    ("{threads: 1, point: {%s: 64}}" % BM, "{threads: 2, point: {%s: 16}}" % BM),
    ("{ranks: {A: 2}, point: {%s: 64}}" % BM, "{ranks: {A: 3}, point: {%s: 16}}" % BM),
    ("{ranks: {A: 2}, point: {%s: 64}}" % BM, "{when: {A: [16]}, point: {%s: 16}}" % BM),
    ("{numel: {A: 4000}, point: {%s: 64}}" % BM, "{numel: {A: 5000}, point: {%s: 16}}" % BM),
    # it sets a dimension the entry above leaves
    ("{when: {A: [64]}, continue: true, point: {%s: 64}}" % BM,
     "{when: {A: [16]}, point: {%s: 16, gemm_host.tunables.BN: 16}}" % BM),
])
def test_an_entry_that_acts_for_some_call_is_kept(lines):
    assert len(parse_mapping(_entries(*lines), "m.yaml").shape_points) == 2


def test_every_shipped_mapping_has_no_dead_entry():
    paths = sorted(glob.glob(str(REPO / "mappings" / "*" / "*.yaml")))
    assert len(paths) > 40
    for path in paths:
        parse_mapping(read_mapping_text(path), path)
