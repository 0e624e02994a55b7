"""Issue 22, the tuning database: a record whose point is not a point of the current space is skipped with a warning
naming the database's file and line (it stopped every call, blamed on the mapping's !tune); an unwritable database
keeps the tuned point in memory and warns (a raw OSError after the search); an unknown leaf or memory among a
!tune's choices is refused at its line like outside !tune; the database's strings are escaped when printed."""
from __future__ import annotations

import logging

import pytest
import torch

import septran
from septran.records import Timing, TuningDB, TuningRecord
from conftest import GEMM_LOGIC, forbid_tilelang, mapping_path

GEMM = mapping_path("cpu")  # a space of 432 points; its first point is BM 256, BN 256, BK 512, ...
BM = "task_mappings.gemm_host.tunables.BM"
SHAPES = dict(A=((64, 48), "float32"), B=((48, 40), "float32"))


@pytest.fixture
def kernel_and_db(tmp_path, monkeypatch):
    """The cpu GEMM space, and a database of its own at a fresh path (the kernel reads SEPTRAN_TUNING_DB)."""
    path = tmp_path / "tuning.jsonl"
    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(path))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=GEMM)
    key = kernel.tuning_key(kernel.specialization(SHAPES, kernel.scalar_values({})))
    return kernel, TuningDB(path), key


def _record(key, point: dict, seconds: float, created: str = "") -> TuningRecord:
    return TuningRecord(key=key, point=point, status="ok", timings=(seconds,), timing=Timing("wall", 1, 1),
                        op="gemm", created=created)


@pytest.mark.parametrize("bad", [10**9, "64", True, 64.0, "__import__('os').system('echo owned')\x1b[2J", None])
def test_a_record_whose_point_is_not_in_the_space_is_skipped_with_its_line(kernel_and_db, bad, caplog, monkeypatch):
    kernel, db, key = kernel_and_db
    space = kernel.mapping.space
    good = {**space.first, BM: 128}
    db.append(_record(key, good, 2e-3))  # line 1: a real point, slower
    db.append(_record(key, {**space.first, BM: bad}, 1e-3))  # line 2: the fastest, not a point of the space
    forbid_tilelang(monkeypatch, "a point is chosen before TileLang")
    with caplog.at_level(logging.WARNING):
        variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) == good  # the valid record, not the first point, not an error
    assert "the tuning database" in kernel.tuning["source"]
    warned = [r.getMessage() for r in caplog.records if "skipped a tuning record" in r.getMessage()]
    assert len(warned) == 1 and f"{db.path}:2:" in warned[0] and BM in warned[0]
    assert "\x1b" not in warned[0]


def test_a_record_naming_a_dimension_the_space_lacks_is_skipped(kernel_and_db, caplog, monkeypatch):
    kernel, db, key = kernel_and_db
    db.append(_record(key, {**kernel.mapping.space.first, "task_mappings.gemm_host.tunables.BX": 8}, 1e-3))
    forbid_tilelang(monkeypatch, "a point is chosen before TileLang")
    with caplog.at_level(logging.WARNING):
        variant = kernel.specialize(**SHAPES)
    # the mapping's own point for these shapes (a small C: its shape_points entry), as with no record at all
    assert "the mapping's point for these shapes" in variant.choice.source
    assert any(f"{db.path}:1:" in r.getMessage() and "BX" in r.getMessage() for r in caplog.records)


def test_the_databases_strings_are_escaped_in_kernel_tuning(kernel_and_db, monkeypatch):
    kernel, db, key = kernel_and_db
    db.append(_record(key, {**kernel.mapping.space.first, BM: 64}, 1e-3, created="2026\x1b]0;owned\x07\r"))
    forbid_tilelang(monkeypatch, "a point is chosen before TileLang")
    kernel.specialize(**SHAPES)
    source = kernel.tuning["source"]
    assert "\x1b" not in source and "\x07" not in source and "\r" not in source and "\\x1b]0;owned" in source


@pytest.mark.parametrize("old, new, name", [
    ("!tune [gemm_leaf_blas, gemm_leaf_cpu,", "!tune [gemm_leaf_blas, gemm_leaf_cpuu,", "gemm_leaf_cpuu"),
    ("A: !tune [GLOBAL, LOCAL]", "A: !tune [GLOBAL, LOCALL]", "LOCALL"),
])
def test_an_unknown_name_among_a_tunes_choices_is_refused_at_its_line(tmp_path, old, new, name):
    text = GEMM.read_text()
    assert old in text
    path = tmp_path / "gemm.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(septran.MappingError, match=f"{name}' \\(a choice of this !tune\\)") as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert info.value.loc.file == str(path) and new in path.read_text().splitlines()[info.value.loc.line - 1]
    assert "did you mean" in info.value.hint


SCALE = '''
from septran import task

@task.define(leaf=True)
def scale_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * 3.0)

@task.define
def scale_block(Y, X):
    task.launch(scale_leaf, Y, X)

@task.define
def scale_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(scale_block, Yp[i, j], Xp[i, j])
'''
SCALE_SPACE = '''
target: cpu
entrypoint: h
task_mappings:
  h:
    task_name: scale_logic
    proc: HOST
    mems: {"*": GLOBAL}
    tunables: {BM: !tune [8, 16], BN: 16}
    calls: {scale_block: b}
  b:
    task_name: scale_block
    proc: BLOCK
    mems: {"*": GLOBAL}
    leaf_task_bindings: {scale_leaf: vector_loops}
'''


@pytest.mark.build
@pytest.mark.parametrize("how", ["/dev/full", "read-only"])
def test_an_unwritable_database_keeps_the_tuned_point_in_memory_and_warns(tmp_path, monkeypatch, caplog, how):
    """/dev/full fails every write with ENOSPC; a read-only file (root may write any, so the write is made to
    fail) with EACCES. Both raised a raw OSError after the whole search."""
    if how == "/dev/full":
        monkeypatch.setenv("SEPTRAN_TUNING_DB", "/dev/full")
    else:
        path = tmp_path / "tuning.jsonl"
        path.write_text("")
        monkeypatch.setenv("SEPTRAN_TUNING_DB", str(path))

        def read_only(self, lines):
            raise PermissionError(13, "Permission denied", str(self.path))

        monkeypatch.setattr(TuningDB, "_write", read_only)
    from septran.tuning import measure

    # The tuner's prebuild goes through tilelang.compile in worker processes (20 s here); the measurement builds
    # each point itself, through the c builder's cache, so the test skips it.
    monkeypatch.setattr(measure, "build_all", lambda jobs, n: [None] * len(jobs))
    logic, mapping = tmp_path / "scale.py", tmp_path / "scale.yaml"
    logic.write_text(SCALE)
    mapping.write_text(SCALE_SPACE)
    kernel = septran.compile(logic_file=logic, mapping_file=mapping, autotune=True)
    x = torch.randn(20, 30)
    with caplog.at_level(logging.WARNING):
        torch.testing.assert_close(kernel(x), 3 * x)
        torch.testing.assert_close(kernel(x), 3 * x)  # the same plan: no second search
    assert kernel.tuning["source"].startswith("tuned now")
    warned = [r.getMessage() for r in caplog.records if "cannot write the tuning database" in r.getMessage()]
    assert len(warned) <= 1 and (warned or how == "/dev/full")  # /dev/full may have warned in an earlier test
    # Another kernel of the same process finds the point kept in memory: no search.
    again = septran.compile(logic_file=logic, mapping_file=mapping)
    torch.testing.assert_close(again(x), 3 * x)
    assert again.tuning["source"].startswith("the tuning database")
