"""Issue 10, item 1: `!tune` wherever an instance holds a scalar; each point an ordinary mapping."""
from __future__ import annotations

import pytest

import septran
from conftest import GEMM_LOGIC, edited_mapping
from septran.errors import LoweringError, MappingError
from septran.mapping import load_mapping

TUNED = "{BM: !tune [32, 64], BN: !tune {type: pow2, min: 16, max: 64}, BK: !tune {type: range, min: 16, max: 48, step: 16}}"


def _space(tmp_path, *edits, target="cpu"):
    return load_mapping(edited_mapping(tmp_path, target, "gemm", *edits))


def test_spellings_expand_in_order(tmp_path):
    m = _space(tmp_path, ("{BM: 256, BN: 256, BK: 512}", TUNED))
    dims = {d.path.rsplit(".", 1)[1]: d.choices for d in m.space.dimensions}
    assert dims == {"BM": (32, 64), "BN": (16, 32, 64), "BK": (16, 32, 48)}
    assert m.space.size == 18 and len(list(m.space.points())) == 18
    assert next(m.space.points()) == m.point == m.space.first
    assert m.space.digest() == _space(tmp_path, ("{BM: 256, BN: 256, BK: 512}", TUNED)).space.digest()


def test_every_scalar_of_an_instance_may_be_tuned(tmp_path):
    m = _space(tmp_path, ("    threads: 256", "    threads: !tune [128, 256]"), ("    pipeline: 3", "    pipeline: !tune [2, 3]"),
               ("    proc: BLOCK\n", "    proc: BLOCK\n    accum_dtype: !tune [float32, float16]\n"
                                    "    copy: {A: {disable_tma: !tune [false, true]}}\n"),
               ("mems: {C: REGISTER, A: SHARED", "mems: {C: REGISTER, A: !tune [SHARED, REGISTER]"),
               ("{gemm_leaf_logic: gemm_leaf_tensorcore}", "{gemm_leaf_logic: !tune [gemm_leaf_tensorcore, gemm_leaf_tensorcore_rows]}"),
               target="sm90")
    tails = sorted(d.path.split(".", 2)[2] for d in m.space.dimensions)
    assert tails == ["accum_dtype", "copy.A.disable_tma", "leaf_task_bindings.gemm_leaf_logic", "mems.A", "pipeline", "threads"]
    other = m.at({"task_mappings.gemm_block_gpu.threads": 256, "task_mappings.gemm_block_gpu.mems.A": "REGISTER"})
    inst = other.instance("gemm_block_gpu")
    assert inst.threads.value == 256 and inst.mems["A"].value == "REGISTER" and inst.pipeline.value == 2
    assert m.instance("gemm_block_gpu").threads.value == 128  # the first point: every dimension's first value


@pytest.mark.parametrize("where", ["target: !tune [cpu, sm90]", "    task_name: !tune [gemm_host_logic, x]"])
def test_tune_only_where_a_scalar_of_an_instance_is(tmp_path, where):
    old = "target: cpu" if where.startswith("target") else "    task_name: gemm_host_logic"
    with pytest.raises(MappingError) as info:
        _space(tmp_path, (old, where))
    assert "!tune cannot stand at" in str(info.value) and info.value.loc.line == 3 + (not where.startswith("target")) * 4


@pytest.mark.parametrize("spec, phrase", [
    ("!tune {type: range, min: 16, max: 8, step: 4}", "larger than max"),
    ("!tune {type: range, min: 1, max: 100000, step: 1}", "at most 4096"),
    ("!tune {type: pow2, min: 33, max: 60}", "no power of two"),
    ("!tune {type: spiral, min: 1}", "must be one of"),
    ("!tune {type: choice, values: []}", "non-empty"),
    ("!tune [32, 32]", "twice"),
    ("!tune []", "non-empty list"),
])
def test_bad_spellings_are_located(tmp_path, spec, phrase):
    with pytest.raises(MappingError) as info:
        _space(tmp_path, ("BM: 256,", f"BM: {spec},"))
    assert phrase in str(info.value) and info.value.loc.line == 10


def test_a_points_mistake_names_the_tune_line(tmp_path):
    """A point whose threads the target refuses: the error is at the !tune, not somewhere in the file."""
    path = edited_mapping(tmp_path, "sm90", "gemm", ("    threads: 256", "    threads: !tune [256, 100]"))
    m = load_mapping(path)
    bad = m.at({"task_mappings.gemm_block_gpu.threads": 100})
    with pytest.raises(LoweringError) as info:
        septran.compile(GEMM_LOGIC, bad)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "!tune" in t)
    assert info.value.loc.line == line and "threads is 100" in str(info.value)
