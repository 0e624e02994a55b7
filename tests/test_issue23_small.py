"""Issue 23, item 6: `@septran.jit` kernels render as `septran.compile`'s do; a call returns what it writes into
(its outputs, passed or allocated; a kernel with none, the read-write tensors it was passed); `task.temp` finds its
name in the caller's bytecode (no source text needed: a notebook cell, exec) or takes `name=`."""
from __future__ import annotations

import linecache

import pytest
import torch

import septran
from septran import task
from septran.frontend import build_graph
from support.rows import rows_logic, rows_mapping


@task.define(leaf=True)
def negate(Y, X):
    task.compute(Y, lambda i, j: -X[i, j])


@task.define(leaf=True)
def add_into(Y, X):
    task.compute(Y, lambda i, j: Y[i, j] + X[i, j])


NEGATE = rows_logic(negate)
ADD_INTO = rows_logic(add_into)


def test_a_jit_kernel_renders_as_a_compiled_one():
    jitted = septran.jit(mapping=rows_mapping("negate"))(NEGATE)
    compiled = septran.compile(NEGATE, rows_mapping("negate"))
    assert repr(jitted) == repr(compiled) and repr(jitted).startswith("<septran.Kernel host(X) -> (Y) on cpu")
    assert jitted._repr_markdown_() == compiled._repr_markdown_()
    assert "not specialised yet" in jitted._repr_markdown_()


def test_a_jit_kernel_that_does_not_compile_renders_its_error():
    jitted = septran.jit(mapping=rows_mapping("negate").replace("BM: 4", "BM: -4"))(NEGATE)
    assert repr(jitted).startswith("<septran.jit host: does not compile: tunable BM must be")
    assert "does not compile" in jitted._repr_markdown_() and "<mapping text>:5" in jitted._repr_markdown_()


@pytest.fixture(scope="module")
def kernels():
    return septran.compile(NEGATE, rows_mapping("negate")), septran.compile(ADD_INTO, rows_mapping("add_into"))


@pytest.mark.build
def test_a_passed_output_is_returned(kernels):
    negate_k, add_k = kernels
    x = torch.randn(10, 7)
    y = torch.empty(10, 7)
    assert negate_k(x, Y=y) is y and torch.equal(y, -x)
    acc = torch.ones(10, 7)
    assert add_k.signature() == "host(Y, X) -> ()"
    out = add_k(acc, x)  # Y is read and written: the kernel returns the tensor it added into
    assert out is acc and torch.allclose(acc, 1 + x)


# task.temp's name -----------------------------------------------------------------------------------------------
TEMPS = '''
from septran import task

@task.define(leaf=True)
def fill(S, X):
    task.compute(S, lambda i, j: X[i, j])

@task.define(leaf=True)
def put(Y, S):
    task.compute(Y, lambda i, j: S[i, j])

@task.define
def rows(Y, X):
    {line}
    task.launch(fill, {arg}, X)
    task.launch(put, Y, {arg})
'''


def _cell(line: str, arg: str = "S"):
    """The logic as a notebook cell holds it: code whose file linecache cannot read."""
    name = "<ipython-input-23-cell>"
    assert not linecache.getline(name, 1)
    namespace: dict = {}
    exec(compile(TEMPS.format(line=line, arg=arg), name, "exec"), namespace)
    return namespace["rows"]


def test_a_temp_in_a_cell_without_source_finds_its_name():
    graph = build_graph(_cell("S = task.temp(4, 4)"))
    assert [t.name for t in graph.tasks["rows"].temps] == ["S"]


def test_a_temp_inside_a_function_finds_its_name():
    graph = build_graph(_cell("def inner():\n        Scores = task.temp(4, 4)\n        return Scores\n    S = inner()"))
    assert [t.name for t in graph.tasks["rows"].temps] == ["Scores"]


def test_a_temp_not_assigned_to_a_name_takes_name():
    graph = build_graph(_cell("T = [task.temp(4, 4, name='S')]", arg="T[0]"))
    assert [t.name for t in graph.tasks["rows"].temps] == ["S"]


@pytest.mark.parametrize("line, arg, phrase", [
    ("T = [task.temp(4, 4)]", "T[0]", 'or name it: task.temp(..., name="S")'),
    ("X = task.temp(4, 4)", "X", "X already names a parameter or temp of rows"),
    ("S = task.temp(4, 4, name='no such')", "S", "the temp's name"),
])
def test_a_temp_without_a_usable_name_is_refused(line, arg, phrase):
    with pytest.raises(septran.FrontendError) as info:
        build_graph(_cell(line, arg))
    assert phrase in str(info.value) and info.value.loc.file == "<ipython-input-23-cell>"
