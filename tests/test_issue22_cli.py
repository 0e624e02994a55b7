"""Issue 22, the CLI: impossible sizes, unknown inputs and negative counts are errors with exit status 2 (no
traceback, nothing allocated); `db export` to a directory is an error; `db list` escapes the database's strings."""
from __future__ import annotations

import pytest

from septran.cli import main as septran_main
from septran.records import Timing, TuningDB, TuningKey, TuningRecord
from conftest import GEMM_LOGIC, mapping_path

GEMM = mapping_path("cpu")  # a space (!tune): the CLI's checks come before any point is built


def _tune(*extra):
    return ["tune", str(GEMM_LOGIC), str(GEMM), "--input", "B=48x40:float32", "--jobs", "1", "--json", *extra]


@pytest.fixture
def no_allocation(monkeypatch):
    """Makes the tuner fail the test if it is reached: each refusal must come first."""
    import septran

    def refuse(*args, **kwargs):
        raise AssertionError("the tuner ran")

    monkeypatch.setattr(septran, "tune", refuse)


@pytest.mark.parametrize("given, phrase", [
    ("A=1000000000x1000000000:float32", "do not fit"),
    ("A=99999999999999999999x1:float32", "do not fit"),
    ("A=64x48:float99", "not a torch dtype"),
])
def test_impossible_sizes_are_refused_before_anything_is_allocated(given, phrase, no_allocation, capsys):
    assert septran_main(_tune("--input", given)) == 2
    err = capsys.readouterr().err
    assert f"--input {given.split('=')[0]}=" in err and phrase in err and "Traceback" not in err


def test_an_input_the_kernel_does_not_have_is_refused(no_allocation, capsys):
    assert septran_main(_tune("--input", "A=64x48:float32", "--input", "Z=4x4:float32")) == 2
    err = capsys.readouterr().err
    assert "the kernel has no parameter 'Z'" in err and "A, B" in err


@pytest.mark.parametrize("option, value", [("--budget", "-1"), ("--budget", "0"), ("--jobs", "-1"), ("--jobs", "x")])
def test_negative_counts_are_refused_with_status_2(option, value, no_allocation, capsys):
    with pytest.raises(SystemExit) as info:
        septran_main(_tune("--input", "A=64x48:float32", option, value))
    assert info.value.code == 2 and option in capsys.readouterr().err


def _db_with_hostile_strings(path) -> TuningDB:
    db = TuningDB(path)
    key = TuningKey(logic_hash="1" * 64, space_hash="2" * 64, target="cpu", device={"cpu": "x\x1b[2J\x1b]0;owned\x07"},
                    dtypes={"A": "float32"}, shapes={"A\x1b[31m": (4, 4)}, scalars={})
    db.append(TuningRecord(key=key, point={"a.tunables.BM": "\x1b[1mbold\r"}, status="ok", timings=(1e-3,),
                           timing=Timing("wall", 1, 1), op="gemm\x1b[5m"))
    return db


def test_db_list_escapes_the_databases_strings(tmp_path, capsys):
    _db_with_hostile_strings(tmp_path / "t.jsonl")
    assert septran_main(["db", "--db", str(tmp_path / "t.jsonl"), "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert "\\x1b[5m" in out and "\\x1b[31m" in out


def test_db_export_to_a_directory_is_refused(tmp_path, capsys):
    _db_with_hostile_strings(tmp_path / "t.jsonl")
    (tmp_path / "out").mkdir()
    assert septran_main(["db", "--db", str(tmp_path / "t.jsonl"), "export", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "Traceback" not in err
