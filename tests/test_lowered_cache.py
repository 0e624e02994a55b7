"""The kernel library's lowerings kept in the build cache (septran/runtime/lowered.py): a kernel that finds its
variant's entry lowers nothing and runs the same program; the key names everything the lowering reads; a kernel
without a name (a user's septran.compile), a dump, a swapped or damaged entry lower again."""
from __future__ import annotations

import shutil
import uuid

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, mapping_path, swap_entries
from septran.ops import kernels
from septran.ops.rope import rope_kernel
from septran.runtime import lowered, variant

pytestmark = pytest.mark.build

X = torch.randn(2, 37, 3, 16)
TABLE = torch.randn(37, 16)


@pytest.fixture
def cache(monkeypatch):
    """The lowered programs' folder, this test's own (the kernels' builds stay in the suite's shared cache)."""
    from septran import env

    monkeypatch.delenv("SEPTRAN_DUMP_DIR", raising=False)
    monkeypatch.setattr(kernels, "_CACHE", {})  # each fresh kernel object stands for a new process's
    stage = f"lowered-test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(lowered, "STAGE", stage)
    yield env.cache_dir()
    shutil.rmtree(env.cache_dir() / stage, ignore_errors=True)


def _fresh_rope():
    kernels._CACHE.clear()
    return rope_kernel("cpu")


def _no_lowering(*args, **kwargs):
    raise AssertionError("lowered, though the build cache holds this variant's lowering")


def test_a_second_kernel_reads_its_lowering_and_runs_the_same_program(cache, monkeypatch):
    first = _fresh_rope()
    want = first(X=X, C=TABLE, S=TABLE)
    source = first._last.tilelang_source
    assert len(list((cache / lowered.STAGE).glob("*.pkl"))) == 1
    monkeypatch.setattr(variant, "lower", _no_lowering)
    monkeypatch.setattr(variant, "emit", _no_lowering)
    second = _fresh_rope()
    assert second is not first
    torch.testing.assert_close(second(X=X, C=TABLE, S=TABLE), want, rtol=0, atol=0)
    assert second._last.tilelang_source == source


def test_the_key_names_shapes_dtypes_point_code_and_settings(cache, monkeypatch):
    kernel = _fresh_rope()
    v = kernel.specialize(X=X, C=TABLE, S=TABLE)
    base = lowered.key(kernel, v.spec, v.choice)
    assert base is not None
    other = kernel.specialize(X=X.half(), C=TABLE.half(), S=TABLE.half())
    assert lowered.key(kernel, other.spec, other.choice) != base
    point = dict(v.choice.point)
    path = next(iter(point))
    assert lowered.key(kernel, v.spec, type(v.choice)(v.choice.mapping, {**point, path: -1}, "")) != base
    monkeypatch.setenv("SEPTRAN_SOMETHING", "1")
    assert lowered.key(kernel, v.spec, v.choice) != base
    monkeypatch.delenv("SEPTRAN_SOMETHING")
    monkeypatch.setattr("septran.build.code_digest.code_digest", lambda: "edited")  # same version
    assert lowered.key(kernel, v.spec, v.choice) != base


def test_a_users_kernel_and_a_dump_lower_every_time(cache, monkeypatch, tmp_path):
    mine = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    assert mine.lowering_name is None
    v = mine.specialize(A=((8, 8), "float32"), B=((8, 8), "float32"))
    assert lowered.key(mine, v.spec, v.choice) is None
    kernel = _fresh_rope()
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path / "dump"))
    v = kernel.specialize(X=X, C=TABLE, S=TABLE)
    assert lowered.key(kernel, v.spec, v.choice) is None
    assert not (cache / lowered.STAGE).exists()


def test_a_swapped_or_damaged_entry_is_lowered_again(cache, caplog):
    kernel = _fresh_rope()
    want32 = kernel(X=X, C=TABLE, S=TABLE)
    want16 = kernel(X=X.half(), C=TABLE.half(), S=TABLE.half())  # a second variant
    a, b = sorted((cache / lowered.STAGE).glob("*.pkl"))
    swap_entries(a, b)
    with caplog.at_level("WARNING"):
        again = _fresh_rope()
        torch.testing.assert_close(again(X=X, C=TABLE, S=TABLE), want32, rtol=0, atol=0)
        torch.testing.assert_close(again(X=X.half(), C=TABLE.half(), S=TABLE.half()), want16, rtol=0, atol=0)
    assert caplog.text.count("another key") == 2
    for entry in (a, b):  # rewritten above, each under its own key: now damaged
        entry.write_bytes(b"damaged")
    caplog.clear()
    with caplog.at_level("WARNING"):
        again = _fresh_rope()
        torch.testing.assert_close(again(X=X, C=TABLE, S=TABLE), want32, rtol=0, atol=0)
    assert str(a.name if a.name in caplog.text else b.name) in caplog.text


def test_a_mapping_or_logic_edited_under_the_same_name_finds_nothing(cache, monkeypatch):
    kernel = _fresh_rope()
    v = kernel.specialize(X=X, C=TABLE, S=TABLE)
    base = lowered.key(kernel, v.spec, v.choice)
    edited = v.choice.mapping.with_dynamic({"X": [0]})  # same file, same name: another mapping
    assert lowered.key(kernel, v.spec, type(v.choice)(edited, v.choice.point, "")) != base
    monkeypatch.setattr("septran.frontend.printer.format_graph", lambda graph: "another logic")
    assert lowered.key(kernel, v.spec, v.choice) != base
