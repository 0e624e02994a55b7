"""Paths and target names from arguments and environment variables are data: refused, never run or followed.

Each path below holds a newline followed by Python that would create a file
if any part of SepTran wrote the path into the generated module it imports;
each test checks the refusal and that the file was not created.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import septran
from septran.runtime import select
from conftest import GEMM_LOGIC, mapping_path

SHAPES = dict(A=((64, 32), "float32"), B=((32, 48), "float32"))


@pytest.fixture
def witness(tmp_path):
    """(payload, path): the payload touches the path when it runs as Python."""
    path = tmp_path / "pwned"
    return f"\nimport os; os.system('touch {path}')\n#", path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("SEPTRAN_TARGET", "SEPTRAN_MAPPING", "SEPTRAN_MAPPING_PATH"):
        monkeypatch.delenv(var, raising=False)


def _compile_and_specialize(**kwargs):
    septran.compile(**kwargs).specialize(**SHAPES)


def test_mapping_file_with_a_newline_runs_nothing(tmp_path, witness):
    payload, pwned = witness
    bad = tmp_path / f"gemm{payload}.yaml"  # the payload's slashes make folders
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(mapping_path("cpu").read_text())
    with pytest.raises(septran.MappingError, match="control character"):
        _compile_and_specialize(logic_file=GEMM_LOGIC, mapping_file=bad)
    assert not pwned.exists()


def test_logic_file_with_a_carriage_return_runs_nothing(tmp_path, witness):
    payload, pwned = witness
    folder = tmp_path / payload.replace("\n", "\r").replace("/", "_")
    folder.mkdir()
    shutil.copy(GEMM_LOGIC, folder / "gemm.py")
    with pytest.raises(septran.FrontendError, match="control character"):
        _compile_and_specialize(logic_file=folder / "gemm.py", mapping_file=mapping_path("cpu"))
    assert not pwned.exists()


def test_septran_mapping_with_a_newline_runs_nothing(tmp_path, witness, monkeypatch):
    payload, pwned = witness
    bad = tmp_path / f"gemm{payload}.yaml"  # the payload's slashes make folders
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(mapping_path("cpu").read_text())
    monkeypatch.setenv("SEPTRAN_MAPPING", str(bad))
    with pytest.raises(septran.MappingError, match="SEPTRAN_MAPPING"):
        _compile_and_specialize(logic_file=GEMM_LOGIC)
    assert not pwned.exists()


def test_septran_mapping_path_with_a_newline_runs_nothing(tmp_path, witness, monkeypatch):
    payload, pwned = witness
    folder = tmp_path / payload.replace("/", "_")
    (folder / "cpu").mkdir(parents=True)
    shutil.copy(mapping_path("cpu"), folder / "cpu" / "gemm.yaml")
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu")
    monkeypatch.setenv("SEPTRAN_MAPPING_PATH", str(folder))
    with pytest.raises(septran.MappingError, match="SEPTRAN_MAPPING_PATH"):
        _compile_and_specialize(logic_file=GEMM_LOGIC)
    assert not pwned.exists()


def test_septran_target_with_a_newline_runs_nothing(witness, monkeypatch):
    payload, pwned = witness
    monkeypatch.setenv("SEPTRAN_TARGET", "cpu" + payload)
    with pytest.raises(septran.SepTranError, match=r"(?s)unknown target.*targets: .*cpu"):
        _compile_and_specialize(logic_file=GEMM_LOGIC)
    assert not pwned.exists()


@pytest.mark.parametrize("value", ["../../../tmp/x", "/tmp/x", "cpu/..", "cpu\n", "."])
def test_septran_target_is_a_name_not_a_path(value, monkeypatch, tmp_path):
    """SEPTRAN_TARGET=../../../tmp/x used to load /tmp/x/gemm.yaml; now refused before any file is read."""
    monkeypatch.setenv("SEPTRAN_TARGET", value)
    monkeypatch.setattr(select, "load_mapping", lambda *a: pytest.fail("a mapping file was read"))
    with pytest.raises(septran.SepTranError, match=r"(?s)unknown target.*not a path.*targets: .*cpu"):
        septran.compile(logic_file=GEMM_LOGIC)


@pytest.mark.parametrize("value", ["../..", "/tmp", "cpu\n", "sm90\r"])
def test_compile_target_argument_is_refused_before_reading(value, monkeypatch):
    monkeypatch.setattr(select, "load_mapping", lambda *a: pytest.fail("a mapping file was read"))
    monkeypatch.setattr(select, "load_logic_file", lambda *a: pytest.fail("the logic file was read"))
    with pytest.raises(septran.SepTranError, match=r"(?s)unknown target.*targets: .*cpu"):
        septran.compile(logic_file=GEMM_LOGIC, target=value)


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x1b", "\u2028"])
def test_mapping_paths_with_control_characters_are_refused(char):
    with pytest.raises(septran.MappingError, match="control character"):
        septran.mapping.load_mapping(f"/tmp/a{char}b.yaml")
