"""Issue 23, item 5: a command for every job. `septran targets`, `explain`, `compile --dump`, `run` (random inputs,
checked against the logic's `reference`, timed), each with `--json`, and exit status 2 with a located message and
no traceback on a user's mistake."""
from __future__ import annotations

import json
import sys
import types

import pytest

from conftest import REPO
from septran.cli import main as septran_main
from septran.target import available_targets

DESIGN = REPO / "examples" / "design_gemm"
LOGIC = DESIGN / "gemm_logic.py"
CPU = DESIGN / "gemm_on_cpu.mapping.yaml"
GEMM = ["--target", "cpu", "--input", "A=40x24:float32", "--input", "B=24x20:float32"]


def _json(capsys) -> object:
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1])


def _refused(capsys, argv, *phrases):
    assert septran_main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(p in err for p in phrases), err


@pytest.fixture
def with_reference(tmp_path):
    """The design's logic with a `reference`, as `septran run` looks for one."""
    path = tmp_path / "gemm_ref.py"
    path.write_text(LOGIC.read_text() + "\n\ndef reference(A, B):\n    return A @ B\n")
    return path


# targets ------------------------------------------------------------------------------------------------------
def test_targets_lists_every_target_with_what_a_mapping_may_name(capsys):
    assert septran_main(["targets", "--json"]) == 0
    rows = _json(capsys)
    assert [r["name"] for r in rows] == available_targets()
    sm90 = next(r for r in rows if r["name"] == "sm90")
    assert sm90["processors"]["BLOCK"]["memories"] == ["GLOBAL", "SHARED", "REGISTER"]
    assert "gemm_leaf_tensorcore" in sm90["leaves"] and "disable_tma" in sm90["copy_options"]
    assert sm90["threads"] == {"max": 1024, "multiple_of": 128, "default": 128} and "bfloat16" in sm90["dtypes"]
    assert septran_main(["targets", "cpu"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("cpu: ") and "leaf gemm_leaf_cpu (gemm)" in text and "proc HOST: memories GLOBAL" in text


def test_targets_refuses_an_unknown_target(capsys):
    _refused(capsys, ["targets", "sm99"], "sm99", "on the command line")


# explain --------------------------------------------------------------------------------------------------------
@pytest.mark.build  # lowers (builds nothing)
def test_explain_shows_each_pass(capsys):
    assert septran_main(["explain", str(LOGIC), str(CPU), *GEMM, "--json"]) == 0
    result = _json(capsys)
    names = [s["name"] for s in result["stages"]]
    assert names == ["00-taskgraph", "01-constants", "02-flatten", "03-verify", "04-stage", "05-place",
                     "06-tileprogram", "tilelang"]
    assert result["kernel"] == "gemm_host_logic(A, B) -> (C)" and result["shapes"]["C"] == [40, 20]
    assert "block_size = 32    because: tunable block_size = 32" in result["stages"][1]["text"]
    assert septran_main(["explain", str(LOGIC), str(CPU), *GEMM, "--stage", "verify"]) == 0
    text = capsys.readouterr().out
    assert "== 03-verify ==" in text and "== 01-constants ==" not in text


@pytest.mark.parametrize("argv, phrases", [
    (["--target", "cpu", "--input", "A=40x24:float32"], ("missing --input for B", "gemm_host_logic(A, B)")),
    ([*GEMM, "--input", "Z=4:float32"], ("the kernel has no parameter 'Z'",)),
    (["--target", "cpu", "--input", "A=40 x 24:float32"], ("is not NAME=SHAPE:DTYPE",)),
    ([*GEMM[:-1], "B=24x20:float99"], ("'float99' is not a torch dtype",)),
    (["--target", "sm99", *GEMM[2:]], ("sm99",)),
    ([*GEMM[:2], "--input", "A=40x24:float32", "--input", "B=25x20:float32"], ("B.shape[0] is 25",)),
])
def test_explain_refuses_mistakes_with_status_2(capsys, argv, phrases):
    _refused(capsys, ["explain", str(LOGIC), str(CPU), *argv], *phrases)


def test_a_mapping_mistake_is_located_in_the_mapping(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CPU.read_text().replace("gemm_leaf_cpu", "gemm_leaf_cpuu"))
    _refused(capsys, ["explain", str(LOGIC), str(bad), *GEMM], f"{bad}:18:24", "did you mean 'gemm_leaf_cpu'")
    _refused(capsys, ["explain", str(tmp_path / "none.py"), str(CPU), *GEMM], "none.py does not exist")


# compile --------------------------------------------------------------------------------------------------------
@pytest.mark.build
def test_compile_dumps_every_stage(capsys, tmp_path):
    assert septran_main(["compile", str(LOGIC), str(CPU), *GEMM, "--dump", str(tmp_path / "d"), "--json"]) == 0
    result = _json(capsys)
    written = sorted(p.name.removeprefix(result["variant"] + ".") for p in (tmp_path / "d").iterdir())
    assert written == ["00-taskgraph.txt", "01-constants.txt", "02-flatten.txt", "03-verify.txt", "04-stage.txt",
                       "05-place.txt", "06-tileprogram.txt", "build.c", "build.so", "build.tile.txt",
                       "build.tilelang.py", "tilelang.py"]
    assert result["built"] and sorted(result["files"]) == sorted(str(p) for p in (tmp_path / "d").iterdir())


def test_compile_refuses_a_dump_folder_that_is_a_file(capsys, tmp_path):
    (tmp_path / "f").write_text("")
    _refused(capsys, ["compile", str(LOGIC), str(CPU), *GEMM, "--dump", str(tmp_path / "f")], "is a file, not a folder")


# run ------------------------------------------------------------------------------------------------------------
@pytest.mark.build
def test_run_checks_against_the_logics_reference_and_times(capsys, with_reference):
    assert septran_main(["run", str(with_reference), str(CPU), *GEMM, "--repeat", "2", "--json"]) == 0
    result = _json(capsys)
    assert result["checked"] and result["ok"] and result["max_error"] < 1e-5 and len(result["times_s"]) == 2
    assert septran_main(["run", str(LOGIC), str(CPU), *GEMM, "--repeat", "1"]) == 0
    assert "not checked: the logic defines no `reference`" in capsys.readouterr().out


@pytest.mark.build
def test_run_exits_1_where_the_result_is_wrong(capsys, tmp_path):
    wrong = tmp_path / "gemm_wrong.py"
    wrong.write_text(LOGIC.read_text() + "\n\ndef reference(A, B):\n    return A @ B + 1\n")
    assert septran_main(["run", str(wrong), str(CPU), *GEMM, "--repeat", "1"]) == 1
    assert "WRONG" in capsys.readouterr().out


def test_run_refuses_a_reference_that_fails(capsys, tmp_path, monkeypatch):
    failing = tmp_path / "gemm_fail.py"
    failing.write_text(LOGIC.read_text() + "\n\ndef reference(A):\n    return A\n")
    monkeypatch.setattr("septran.runtime.kernel.Kernel.__call__", lambda self, *a, **k: a[0] @ a[1])  # nothing built
    _refused(capsys, ["run", str(failing), str(CPU), *GEMM, "--repeat", "1"], "the logic's reference failed: TypeError")


def test_run_refuses_a_count_below_one(capsys):
    with pytest.raises(SystemExit) as info:
        septran_main(["run", str(LOGIC), str(CPU), *GEMM, "--repeat", "0"])
    assert info.value.code == 2 and "--repeat" in capsys.readouterr().err


def test_run_hands_an_onnx_model_to_septran_onnx(capsys, monkeypatch):
    calls = []
    fake = types.ModuleType("septran.onnx.cli")
    fake.run_onnx = lambda path, inputs, as_json: calls.append((path, inputs, as_json)) or 0
    monkeypatch.setitem(sys.modules, "septran.onnx", types.ModuleType("septran.onnx"))
    monkeypatch.setitem(sys.modules, "septran.onnx.cli", fake)
    assert septran_main(["run", "m.onnx", "--input", "x=2x3:float32", "--json"]) == 0
    assert calls == [("m.onnx", ["x=2x3:float32"], True)]
    _refused(capsys, ["run", "m.onnx", str(CPU), "--input", "x=2x3:float32"], "an ONNX model takes no mapping")


def test_run_without_the_onnx_extra_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "septran.onnx.cli", None)  # as if the module were missing
    _refused(capsys, ["run", "m.onnx", "--input", "x=2x3:float32"], "pip install septran[onnx]")


def test_run_for_a_gpu_target_without_one_says_so(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    _refused(capsys, ["run", str(LOGIC), str(DESIGN / "gemm_on_nvidia_gpu.mapping.yaml"), "--target", "sm90",
                      "--input", "A=256x256:float16", "--input", "B=256x256:float16"],
             "target sm90 runs on a CUDA device, and torch sees none here")


def test_tune_for_a_gpu_target_without_one_says_so(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    _refused(capsys, ["tune", str(REPO / "examples" / "gemm" / "gemm.py"), str(REPO / "mappings" / "sm90" / "gemm.yaml"),
                      "--input", "A=256x256:float16", "--input", "B=256x256:float16"],
             "target sm90 runs on a CUDA device and torch sees none here")
