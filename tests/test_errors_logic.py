"""One test per logic (Task Lang) error: a clear message, at the user's file and line.

In the style of Halide's test/error and Triton's test_compile_errors.py: each
case is a small logic file under tests/logic_cases/, and the expected line is
the one carrying a ``# <- marker`` comment, so editing a case never silently
shifts what is checked.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import septran
from septran.frontend import build_graph

REPO = Path(__file__).resolve().parents[1]
CASES = Path(__file__).resolve().parent / "logic_cases"
SEPTRAN_DIR = str(Path(septran.__file__).resolve().parent) + os.sep


def load(name: str):
    path = CASES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"logic_case_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def line_of(name: str, marker: str) -> int:
    lines = (CASES / f"{name}.py").read_text().splitlines()
    hits = [i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# <- {marker}")]
    assert len(hits) == 1, f"marker {marker!r} must occur once in {name}.py"
    return hits[0]


def check(err: septran.SepTranError, name: str, marker: str, *phrases: str) -> None:
    """``err`` is at the marked line of logic_cases/<name>.py, rendered with that line and a caret."""
    path = str(CASES / f"{name}.py")
    line = line_of(name, marker)
    assert err.loc is not None, f"no location:\n{err}"
    assert (err.loc.file, err.loc.line) == (path, line), f"reported at {err.loc}, expected {path}:{line}:\n{err}"
    assert not os.path.abspath(err.loc.file).startswith(SEPTRAN_DIR), "the location is SepTran's, not the user's"
    text = str(err)
    assert text.startswith(f"{path}:{line}: logic error: "), text
    rendered = text.splitlines()
    source = (CASES / f"{name}.py").read_text().splitlines()[line - 1]
    assert rendered[1] == "    " + source, f"the offending source line is not shown:\n{text}"
    caret = rendered[2]
    assert caret.strip() == "^", f"no caret line:\n{text}"
    assert caret.index("^") - 4 == len(source) - len(source.lstrip()), "the caret is not under the statement"
    assert SEPTRAN_DIR not in text, f"a SepTran-internal file in the message:\n{text}"
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"


# (a) Task Lang outside a task ----------------------------------------------------------


@pytest.mark.parametrize(
    "api, function, args",
    [
        ("partition", "partitions", 1),
        ("launch", "launches", 1),
        ("range", "loops", 1),
        ("parallel_range", "parallel_loops", 1),
        ("call_primitive", "calls_a_primitive", 3),
    ],
)
def test_primitive_outside_a_task(api, function, args):
    module = load("outside_task")
    with pytest.raises(septran.FrontendError) as info:
        getattr(module, function)(*[object()] * args)
    check(info.value, "outside_task", f"{api} outside", f"task.{api} used outside a task", "@task.define")


def test_primitive_outside_a_task_while_septran_loads_the_file():
    """At module level of a logic file that septran.compile imports: still the user's line, not importlib's."""
    with pytest.raises(septran.FrontendError) as info:
        septran.compile(logic_file=CASES / "outside_task_toplevel.py", mapping_file=REPO / "mappings" / "cpu" / "gemm.yaml")
    check(info.value, "outside_task_toplevel", "error here", "task.range used outside a task", "@task.define")


# (b) task.launch with the wrong number of arguments ------------------------------------


def test_launch_with_wrong_arity():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_launch").host)
    check(info.value, "bad_launch", "error here", "task.launch: leaf takes 3 arguments (C, A, B), got 2")


# (c) a partition tile whose rank differs from the tensor's -----------------------------


def test_tile_rank_differs_within_a_task():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_rank").twice)
    line = line_of("bad_rank", "error here")
    check(info.value, "bad_rank", "error here", "tile has 3 entries but A was partitioned with 2",
          f"bad_rank.py:{line - 1}")  # names the other partition


def test_tile_rank_differs_from_a_tile_it_splits():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_rank").tile_of_tile)
    check(info.value, "bad_rank", "tile of a tile", "tile has 3 entries but the tensor has rank 2")


def test_tile_rank_differs_from_the_tile_passed_in():
    """The callee partitions C with 3 entries; the caller passes it a 2-d tile. Found when the graph is built."""
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_rank").host)
    launch = line_of("bad_rank", "callee rank error") + 8  # host's launch of block
    assert "task.launch(block" in (CASES / "bad_rank.py").read_text().splitlines()[launch - 1]
    check(info.value, "bad_rank", "callee rank error", "the tensor passed as C", f"bad_rank.py:{launch}",
          "has rank 2", "C of task block has rank 3", "one entry per dimension")


def test_tile_rank_differs_from_the_tile_passed_in_via_compile():
    with pytest.raises(septran.FrontendError) as info:
        septran.compile(logic_file=CASES / "bad_rank.py", mapping_file=CASES.parent / "mapping_cases" / "bad_rank_cpu.yaml")
    check(info.value, "bad_rank", "callee rank error", "has rank 2", "C of task block has rank 3")


# (d) an unknown primitive ---------------------------------------------------------------


def test_unknown_primitive_suggests_the_right_one():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_primitive").typo)
    check(info.value, "bad_primitive", "unknown primitive", "unknown primitive 'gemn'", "did you mean 'gemm'?")


# (e) call_primitive in a task that is not a leaf ----------------------------------------


def test_primitive_in_an_inner_task():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_primitive").not_leaf)
    check(info.value, "bad_primitive", "not a leaf", "task not_leaf calls primitive 'gemm' but is not a leaf task",
          "@task.define(leaf=True)")


# (f) launching something that is not a task ---------------------------------------------


def test_launch_of_a_plain_function():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_launch").launches_non_task)
    check(info.value, "bad_launch", "not a task", "task.launch: 'helper' is not a task", "decorate it with @task.define")


def test_calling_a_task_directly():
    task_fn = load("bad_primitive").typo
    with pytest.raises(septran.FrontendError) as info:
        task_fn(1, 2, 3)  # <- called directly
    err = info.value
    here = Path(__file__).read_text().splitlines()
    line = next(i for i, t in enumerate(here, 1) if t.rstrip().endswith("# <- called directly"))
    assert (err.loc.file, err.loc.line) == (__file__, line), err.loc
    assert str(err).startswith(f"{__file__}:{line}: logic error: task typo cannot be called directly")
    assert "task.launch" in str(err) and "septran.compile" in str(err)
