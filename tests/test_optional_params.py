"""Optional tensor parameters (``M=None``, issue 12): one trace per set of optional tensors a call passes.

The logic decides with a plain ``if B is not None:`` at trace time; the kernel traces (and checks the
mapping of) each set on the first call that passes it, and binds calls as: required inputs, then optional
tensors in the entry's order, then scalars, any of them by name.
"""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from septran.frontend.graph import build_graph

TRACES: list = []  # the sets of optional tensors the entry was traced with


@task.define(leaf=True)
def affine(Y, X, B=None, S=None, c=0.0):
    if B is None and S is None:
        task.compute(Y, lambda i, j: X[i, j] + c)
    elif S is None:
        task.compute(Y, lambda i, j: X[i, j] + B[i, j] + c)
    elif B is None:
        task.compute(Y, lambda i, j: X[i, j] * S[i, j] + c)
    else:
        task.compute(Y, lambda i, j: (X[i, j] + B[i, j]) * S[i, j] + c)


@task.define
def rows(Y, X, B=None, S=None, c=0.0):
    task.launch(affine, Y, X, B, S, c)


@task.define
def host(Y, X, B=None, S=None, c=0.0):
    TRACES.append((B is not None, S is not None))
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=("BM", None)) if B is not None else None
    Sp = task.partition(S, by="blocks", tile=("BM", None)) if S is not None else None
    for i in task.parallel_range(Yp.shape[0]):  # an optional tile by position and one by name
        task.launch(rows, Yp[i, 0], Xp[i, 0], Bp[i, 0] if B is not None else None, S=Sp[i, 0] if S is not None else None, c=c)


MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host: {task_name: host, proc: HOST, mems: {Y: GLOBAL, X: GLOBAL, B: GLOBAL, S: GLOBAL}, tunables: {BM: 4}, calls: {rows: blk}}
  blk: {task_name: rows, proc: BLOCK, mems: {Y: GLOBAL, X: GLOBAL, B: GLOBAL, S: GLOBAL}, leaf_task_bindings: {affine: vector_loops}}
"""


@pytest.fixture(scope="module")
def kernel():
    TRACES.clear()
    return septran.compile(host, MAPPING)


def _inputs(shape=(10, 7)):
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(*shape, generator=gen) for _ in range(3)]


@pytest.mark.build
def test_every_combination_computes_what_the_logic_says(kernel):
    x, b, s = _inputs()
    close = lambda out, ref: torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)  # noqa: E731
    close(kernel(x), x)
    close(kernel(x, b), x + b)
    close(kernel(x, S=s), x * s)
    close(kernel(x, None, s, 2.0), x * s + 2)
    close(kernel(x, b, s, 2.0), (x + b) * s + 2)
    close(kernel(x, B=b, S=s, c=1.0), (x + b) * s + 1)
    close(kernel(X=x, B=None, c=0.5), x + 0.5)
    close(kernel(x, b), x + b)  # the positional fast path, a second time


@pytest.mark.build
def test_each_set_is_traced_once_on_first_use():
    TRACES.clear()
    k = septran.compile(host, MAPPING)
    assert TRACES == [(False, False)]  # at compile time: the call without optional tensors (its mapping checked)
    x, b, s = _inputs((3, 5))
    k(x, b)
    k(x, b)
    k(x, B=b)
    assert TRACES == [(False, False), (True, False)]
    k(x, None, s)
    assert TRACES[-1] == (False, True) and len(TRACES) == 3
    assert "B:" not in k.tilelang_source and "S:" in k.tilelang_source  # the latest call's program


def test_specialize_takes_optional_tensors(kernel):
    plain = kernel.specialize(X=((9, 4), "float32"))
    both = kernel.specialize(X=((9, 4), "float32"), B=((9, 4), "float32"), S=((9, 4), "float32"))
    assert "B:" not in plain.tilelang_source and "B:" in both.tilelang_source and "S:" in both.tilelang_source
    assert kernel.tilelang_source == both.tilelang_source


def test_an_optional_tensor_of_the_wrong_shape_or_type_is_refused(kernel):
    x, b, _ = _inputs()
    with pytest.raises(septran.CallError, match="B must be a torch.Tensor"):
        kernel(x, 0.5)  # the second position is B, not the scalar c
    with pytest.raises(septran.CallError, match=r"B\.shape\[0\] is 9"):
        kernel(x, b[:9])
    with pytest.raises(septran.CallError, match="given twice"):
        kernel(x, b, B=b)


def test_mems_may_name_an_optional_tensor_but_not_a_stranger():
    septran.compile(host, MAPPING)  # B and S are named though absent: fine
    with pytest.raises(septran.MappingError, match="names 'Z', which is not a parameter of host"):
        septran.compile(host, MAPPING.replace("B: GLOBAL, S: GLOBAL}, tunables", "Z: GLOBAL}, tunables"))


@pytest.mark.build
def test_the_mems_default_places_an_optional_tensor():
    k = septran.compile(host, MAPPING.replace("B: GLOBAL, S: GLOBAL}, tunables", '"*": GLOBAL}, tunables'))
    x, b, _ = _inputs()
    torch.testing.assert_close(k(x, b), x + b)


def test_none_for_a_required_tensor_is_refused():
    @task.define
    def bad_host(Y, X, B=None):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], None)

    with pytest.raises(septran.FrontendError, match="X of rows is None, but it is not optional"):
        build_graph(bad_host)


def test_one_task_launched_with_and_without_an_optional_tensor_is_refused():
    @task.define
    def twice(Y, X, B):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        Bp = task.partition(B, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0], Bp[i, 0])
            task.launch(rows, Yp[i, 0], Xp[i, 0])

    with pytest.raises(septran.FrontendError, match="rows is launched without S at .* and without B, S here"):
        build_graph(twice)


def test_launch_arity_and_names():
    @task.define
    def unknown_name(Y, X):
        task.launch(rows, Y, X, Q=X)

    @task.define
    def too_few(Y, X):
        task.launch(rows, Y)

    with pytest.raises(septran.FrontendError, match="rows has no parameter 'Q'"):
        build_graph(unknown_name)
    with pytest.raises(septran.FrontendError, match=r"rows takes 2 arguments and up to 3 optional tensors and scalars "
                                                    r"\(Y, X, B=None, S=None, c=0.0\), got 1"):
        build_graph(too_few)


def test_an_optional_tensor_the_logic_only_writes_is_refused():
    @task.define(leaf=True)
    def fill(Y, X, Z=None):
        task.compute(Y, lambda i, j: X[i, j])
        if Z is not None:
            task.compute(Z, lambda i, j: X[i, j])

    @task.define
    def blk(Y, X, Z=None):
        task.launch(fill, Y, X, Z)

    @task.define
    def top(Y, X, Z=None):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        Zp = task.partition(Z, by="blocks", tile=("BM", None)) if Z is not None else None
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(blk, Yp[i, 0], Xp[i, 0], Zp[i, 0] if Z is not None else None)

    mapping = MAPPING.replace("host", "top").replace("rows", "blk").replace("affine", "fill").replace("B: GLOBAL, S: GLOBAL", "Z: GLOBAL")
    k = septran.compile(top, mapping)
    x, z, _ = _inputs()
    with pytest.raises(septran.CallError, match="optional tensor Z is written but never read"):
        k(x, z)
