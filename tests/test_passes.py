"""The lowering as a pass list: per-pass dumps (golden for attention), the tile program printer's
goldens, internal failures reported as SepTran's bugs, and the rules the check pass added."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import septran
from conftest import GEMM_LOGIC, REPO, edited_mapping, forbid_tilelang, mapping_path
from septran.errors import InternalError, LoweringError, MappingError
from septran.lowering import pipeline

ATTENTION = REPO / "examples" / "attention" / "attention.py"
PASSES = ("00-taskgraph", "01-constants", "02-flatten", "03-verify", "04-stage", "05-place", "06-tileprogram")


def _attention(target: str = "sm90", dtype: str = "float16"):
    kernel = septran.compile(logic_file=ATTENTION, mapping_file=mapping_path(target, "attention"))
    return kernel.specialize(Q=((1, 2, 200, 64), dtype), K=((1, 2, 300, 64), dtype), V=((1, 2, 300, 64), dtype))


def _portable(text: str) -> str:
    return text.replace(str(REPO) + "/", "")


def test_attention_dumps_every_pass(monkeypatch, tmp_path, golden):
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path))
    variant = _attention()
    for name in PASSES:
        (path,) = tmp_path.glob(f"*.{name}.txt")
        golden(f"attention.sm90.{name}.txt", _portable(path.read_text()))
    assert next(tmp_path.glob("*.tilelang.py")).read_text() == variant.tilelang_source


@pytest.mark.parametrize("target", ["cpu", "sm90", "dsa_ref"])
def test_tile_program_matches_golden(target, golden):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(target))
    dtype = "float32" if target == "cpu" else "float16"
    variant = kernel.specialize(A=((1000, 520), dtype), B=((520, 777), dtype))
    golden(f"gemm.{target}.tileprogram.txt", _portable(variant.explain()))


def test_pass_list_reads_top_to_bottom():
    """Each pass is one step of lower(), in order, each followed by its dump."""
    source = inspect.getsource(pipeline.lower)
    steps = ["check_mapping(", "resolve_constants(", "flatten(", "verify(", "stage(", "place(", "check_capacity("]
    assert [source.index(s) for s in steps] == sorted(source.index(s) for s in steps)


def test_a_failing_pass_is_an_internal_error(monkeypatch):
    def broken(*args):
        raise KeyError("boom")

    monkeypatch.setattr(pipeline, "stage", broken)
    with pytest.raises(InternalError) as info:
        _attention()
    text = str(info.value)
    assert "stage" in text and "KeyError" in text and "please report" in text and "attention.py" in text
    assert not isinstance(info.value, septran.SepTranError)


def test_no_lowering_file_is_longer_than_400_lines():
    for path in (REPO / "septran").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, f"{path.relative_to(REPO)} is longer than 400 lines"


# rules of the check pass -------------------------------------------------------------------


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


def test_copy_option_the_target_does_not_take(tmp_path, monkeypatch):
    forbid_tilelang(monkeypatch, "refused before TileLang")
    path = edited_mapping(tmp_path, "cpu", "gemm", ("    leaf_task_bindings:", "    copy: {A: {disable_tma: true}}\n    leaf_task_bindings:"))
    with pytest.raises(MappingError) as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert info.value.loc.line == _line_of(path, "disable_tma")
    assert "cpu does not take the copy option 'disable_tma'" in str(info.value) and "eviction_policy" in str(info.value)


@pytest.mark.build
def test_cpu_store_evict_first_streams_past_the_caches(tmp_path):
    """On cpu a store out of LOCAL with ``eviction_policy: evict_first`` is the vendor's non-temporal store
    (septran_cpu_stream_*); evict_normal and no option are the plain store; the results are the same."""
    import torch

    logic = REPO / "examples" / "rmsnorm" / "rmsnorm.py"
    x, w = torch.randn(37, 1031), torch.randn(1031)
    want = torch.nn.functional.rms_norm(x.double(), (1031,), w.double(), 1e-6)
    for policy, fn in (("evict_first", "septran_cpu_stream_f32_f32"), ("evict_normal", "septran_cpu_store_f32_f32")):
        path = edited_mapping(tmp_path, "cpu", "rmsnorm", ("{Y: GLOBAL, X: GLOBAL, W: GLOBAL, rstd: LOCAL",
                                                           "{Y: LOCAL, X: GLOBAL, W: GLOBAL, rstd: LOCAL"),
                              ("    copy: {Y: {eviction_policy: evict_first}}", f"    copy: {{Y: {{eviction_policy: {policy}}}}}"))
        kernel = septran.compile(logic_file=logic, mapping_file=path)
        y = kernel(x, w, eps=1e-6)
        assert fn in kernel.latest.tilelang_source
        torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)


def test_accumulator_a_vendor_unit_cannot_take(tmp_path):
    path = edited_mapping(tmp_path, "dsa_ref", "gemm", ("    leaf_task_bindings:", "    accum_dtype: float16\n    leaf_task_bindings:"))
    with pytest.raises(MappingError) as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert info.value.loc.line == _line_of(path, "accum_dtype")
    assert "accumulates in float32" in str(info.value)


@pytest.mark.parametrize("target", ["sm80", "sm90", "gfx942"])
def test_float32_attention_on_tensor_cores_is_refused_at_the_binding(target, monkeypatch):
    """TileLang cannot feed T.gemm from a float32 fragment ("Layout infer conflict between S and P")."""
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(LoweringError) as info:
        _attention(target, "float32")
    path = mapping_path(target, "attention")
    assert info.value.loc.file == str(path)
    assert "cannot read A as float32 from REGISTER" in str(info.value)


def test_pipeline_without_a_range(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("    calls: {gemm_block_logic: gemm_block_cpu}",
                                                    "    calls: {gemm_block_logic: gemm_block_cpu}\n    pipeline: 4"))
    with pytest.raises(MappingError) as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert info.value.loc.line == _line_of(path, "pipeline: 4")
    assert "has no task.range" in str(info.value)


def test_unused_tunable_with_did_you_mean(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("BK: 512}", "BK: 512, BKK: 32}"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    with pytest.raises(MappingError) as info:
        kernel.specialize(A=((64, 64), "float32"), B=((64, 64), "float32"))
    assert info.value.loc.line == _line_of(path, "BKK")
    assert "never uses" in str(info.value) and "did you mean 'BK'" in str(info.value)
