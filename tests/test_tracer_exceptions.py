"""Whatever a logic file raises while it is loaded or traced is a FrontendError at the user's line.

The user's own exceptions (NameError, ZeroDivisionError, raise) included, with
the original type and message in the text; no SepTran-internal file name in
the message. One test per finding of issue 9.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import septran
from conftest import GEMM_LOGIC, mapping_path

SOURCE = GEMM_LOGIC.read_text()
LOOP = "    for k in task.range(Ap.shape[1]):  # sequential: may be pipelined\n"
SEPTRAN_DIR = str(Path(septran.__file__).resolve().parent) + os.sep


def refused(tmp_path, old: str, new: str, *phrases: str, also: tuple = ()) -> septran.FrontendError:
    """Compiles gemm.py with ``old`` replaced by ``new`` (marked ``# <- here``); the error is at that line."""
    text = SOURCE
    for a, b in ((old, new),) + also:
        assert a in text
        text = text.replace(a, b, 1)
    path = tmp_path / "gemm.py"
    path.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.endswith("# <- here"))
    with pytest.raises(septran.FrontendError) as info:
        septran.compile(logic_file=path, mapping_file=mapping_path("cpu")).specialize(
            A=((64, 32), "float32"), B=((32, 48), "float32"))
    err = info.value
    assert (err.loc.file, err.loc.line) == (str(path), line), f"at {err.loc}, expected line {line}:\n{err}"
    text = str(err)
    assert SEPTRAN_DIR not in text and "Traceback" not in text, text
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"
    return err


def test_define_applied_twice(tmp_path):
    refused(tmp_path, "@task.define\ndef gemm_block_logic", "@task.define  # <- here\n@task.define\ndef gemm_block_logic",
            "applied twice")


def test_int_of_a_symbolic_shape(tmp_path):
    refused(tmp_path, LOOP, "    n = int(A.shape[0])  # <- here\n" + LOOP, "TypeError", "no Python integer value")


def test_true_division_of_a_shape(tmp_path):
    refused(tmp_path, LOOP, "    n = task.global_size(A, 1) / 2  # <- here\n" + LOOP, "TypeError", "use //")


@pytest.mark.parametrize("extent", ["10**400", "10**12", "2**31", "-1"])
def test_loop_extent_beyond_int32(tmp_path, extent):
    refused(tmp_path, LOOP, f"    for k in task.range({extent}):  # <- here\n", "task.range")


def test_huge_index_constant(tmp_path):
    refused(tmp_path, "task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])",
            "task.launch(gemm_leaf_logic, C, Ap[2**40, k], Bp[k, 0])  # <- here", "int32")


def test_users_name_error(tmp_path):
    refused(tmp_path, "task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])",
            "task.launch(gemm_leaf_logix, C, Ap[0, k], Bp[k, 0])  # <- here", "NameError", "gemm_leaf_logix")


def test_users_zero_division(tmp_path):
    refused(tmp_path, LOOP, "    x = 1 / 0  # <- here\n" + LOOP, "ZeroDivisionError")


def test_users_own_raise(tmp_path):
    refused(tmp_path, LOOP, "    raise ValueError('boom')  # <- here\n" + LOOP, "ValueError: boom")


def test_exception_in_a_helper_is_reported_at_the_helpers_line(tmp_path):
    refused(tmp_path, "@task.define\ndef gemm_block_logic",
            "def helper():\n    return {}['x']  # <- here\n\n\n@task.define\ndef gemm_block_logic", "KeyError",
            also=((LOOP, "    helper()\n" + LOOP),))


def test_syntax_error_when_loading(tmp_path):
    refused(tmp_path, "def gemm_block_logic(C, A, B):", "def gemm_block_logic(C, A, B:  # <- here", "SyntaxError")


def test_exception_at_module_level(tmp_path):
    refused(tmp_path, "@task.define\ndef gemm_host_logic", "undefined_name  # <- here\n\n\n@task.define\ndef gemm_host_logic",
            "NameError", "while loading the logic file")


@pytest.mark.parametrize("name", ["print", "float", "range"])  # T: the lowering renames it (test_issue22_errors)
def test_parameter_named_like_the_generated_module(tmp_path, name):
    refused(tmp_path, "@task.define(leaf=True)\ndef gemm_leaf_logic(C, A, B):\n    task.call_primitive(\"gemm\", C, A, B)",
            f"@task.define(leaf=True)  # <- here\ndef gemm_leaf_logic(C, A, {name}):\n    task.call_primitive(\"gemm\", C, A, {name})",
            "rename it")


def test_tunable_named_like_a_builtin(tmp_path):
    refused(tmp_path, 'Bp = task.partition(B, by="blocks", tile=("BK", "BN"))',
            'Bp = task.partition(B, by="blocks", tile=("BK", "id"))  # <- here', "Python builtin")


def test_lambda_as_a_task(tmp_path):
    refused(tmp_path, '@task.define(leaf=True)\ndef gemm_leaf_logic(C, A, B):\n    task.call_primitive("gemm", C, A, B)  # C += A @ B on tiles',
            "gemm_leaf_logic = task.define(lambda C, A, B: None, leaf=True)  # <- here", "task's name")


def test_loop_index_used_after_its_loop(tmp_path):
    """Python keeps `k` after the loop; a tile indexed with it outside the loop used to reach TileLang."""
    refused(tmp_path, "        task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])\n",
            "        task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])\n"
            "    task.launch(gemm_leaf_logic, C, Ap[0, k], Bp[k, 0])  # <- here\n", "used outside its loop")
