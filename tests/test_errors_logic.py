"""One test per logic (Task Lang) error: the message, and the user's file and line."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import septran
from septran.frontend import build_graph

CASES = Path(__file__).resolve().parent / "logic_cases"


def load(name: str):
    path = CASES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"logic_case_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(name: str, marker: str) -> int:
    lines = (CASES / f"{name}.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if f"# <- {marker}" in text)


def check(err: septran.SepTranError, name: str, marker: str, *phrases: str) -> None:
    path = str(CASES / f"{name}.py")
    assert err.loc is not None and err.loc.file == path and err.loc.line == line_of(name, marker), err.loc
    text = str(err)
    assert text.startswith(f"{path}:{line_of(name, marker)}")
    assert f"# <- {marker}" in text, "the offending source line is shown"
    assert "septran/" not in text.replace(path, ""), "no SepTran-internal file in the message"
    for phrase in phrases:
        assert phrase in text, text


def test_primitive_outside_a_task():
    module = load("outside_task")
    with pytest.raises(septran.FrontendError) as info:
        module.not_a_task(object())
    check(info.value, "outside_task", "error here", "task.partition used outside a task", "@task.define")


def test_launch_with_wrong_arity():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_launch").host)
    check(info.value, "bad_launch", "error here", "leaf takes 3 arguments (C, A, B), got 2")


def test_launch_of_a_plain_function():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_launch").launches_non_task)
    check(info.value, "bad_launch", "not a task", "'helper' is not a task", "@task.define")


def test_tile_rank_differs_within_a_task():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_rank").twice)
    check(info.value, "bad_rank", "error here", "tile has 3 entries but A was partitioned with 2")


def test_tile_rank_differs_from_the_tile_passed_in():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_rank").host)
    check(info.value, "bad_rank", "callee rank error", "has rank 2", "rank 3")


def test_unknown_primitive_suggests_the_right_one():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_primitive").typo)
    check(info.value, "bad_primitive", "unknown primitive", "unknown primitive 'gemn'", "did you mean 'gemm'?")


def test_primitive_in_an_inner_task():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_primitive").not_leaf)
    check(info.value, "bad_primitive", "not a leaf", "is not a leaf task", "leaf=True")


def test_calling_a_task_directly():
    with pytest.raises(septran.FrontendError, match="cannot be called directly"):
        load("bad_primitive").typo(1, 2, 3)
