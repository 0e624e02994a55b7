"""Index arithmetic in task.compute: shifted reads (X[i, j + 1]), constant indices (X[i, 0], s[0]), gathers
(X[i, Ix[i, j]]) and one tile read at several index sets; reads outside a tile are refused at the user's line."""
from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import septran
from septran import task
from support.rows import rows_logic, rows_mapping

HERE = __file__


def _line(fn, marker: str = "task.compute") -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, text in enumerate(lines) if marker in text)


def _shifted(o: int, slack: int):
    """Y[i, j] = X[i, j + o] where that is inside the row, else 0; ``slack`` widens the guard by that many."""
    if o >= 0:
        @task.define(leaf=True)
        def shifted(Y, X):
            task.compute(Y, lambda i, j: task.where(task.global_index(X, 1, j) < X.shape[1] - o + slack, X[i, j + o], 0.0)
                         + 0.0 * X[i, j])
    else:
        @task.define(leaf=True)
        def shifted(Y, X):
            task.compute(Y, lambda i, j: task.where(task.global_index(X, 1, j) >= -o - slack, X[i, j + o], 0.0)
                         + 0.0 * X[i, j])
    return shifted


def _compile(leaf, bm: int = 4):
    return septran.compile(rows_logic(leaf), mapping=rows_mapping(leaf.name, bm))


def _reference_shift(x: torch.Tensor, o: int) -> torch.Tensor:
    out = torch.zeros_like(x)
    n = x.shape[1]
    if o >= 0:
        out[:, :max(n - o, 0)] = x[:, o:]
    else:
        out[:, -o:] = x[:, :n + o]
    return out


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(o=st.integers(-6, 6), slack=st.integers(0, 2), cols=st.integers(1, 9))
def test_shifted_reads_are_proved_or_refused(o, slack, cols):
    """A guard that keeps j + o in the row is proved; one that lets it out by `slack` is refused, at the compute."""
    leaf = _shifted(o, slack)
    kernel = _compile(leaf)
    outside = o != 0 and slack > 0 and cols > abs(o) - slack  # some j passes the guard and reads past the row
    if not outside:
        kernel.specialize(X=((3, cols), "float32"))
        return
    with pytest.raises(septran.LoweringError) as info:
        kernel.specialize(X=((3, cols), "float32"))
    err = info.value
    assert err.loc.file == HERE and "task.compute" in err.loc.source_line(), str(err)
    assert "reads X at" in str(err) and f"holds {cols} element" in str(err)


@pytest.mark.parametrize("o", [-3, -1, 1, 2, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.build
def test_shifted_reads_compute_right(o, dtype):
    x = torch.randn(7, 11, generator=torch.Generator().manual_seed(o + 10)).to(dtype)
    out = _compile(_shifted(o, 0))(x)
    assert torch.equal(out, _reference_shift(x, o))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(c=st.integers(-3, 9), cols=st.integers(1, 7))
def test_constant_index_in_the_tile_or_refused(c, cols):
    @task.define(leaf=True)
    def first(Y, X):
        task.compute(Y, lambda i, j: X[i, j] * X[i, c])

    kernel = _compile(first)
    if 0 <= c < cols:
        kernel.specialize(X=((3, cols), "float32"))
        return
    with pytest.raises(septran.LoweringError) as info:
        kernel.specialize(X=((3, cols), "float32"))
    assert (info.value.loc.file, info.value.loc.line) == (HERE, _line(first)), str(info.value)
    assert f"reads X at {c}..{c} along dimension 1" in str(info.value)


@pytest.mark.build
def test_constant_and_shape_indices_compute_right():
    @task.define(leaf=True)
    def mirror(Y, X):
        half = X.shape[1] // 2
        task.compute(Y, lambda i, j: X[i, 0] + X[i, half] * X[i, j] + X[i, (X.shape[1] - 1) - j])

    x = torch.randn(6, 13, generator=torch.Generator().manual_seed(3))
    out = _compile(mirror)(x)
    torch.testing.assert_close(out, x[:, :1] + x[:, 6:7] * x + x.flip(1))


@pytest.mark.build
def test_a_read_with_no_plain_index_at_all():
    """Every index shifted or constant (X[i + 0, (X.shape[1] - 1) - j], X[0, j]): a read as any other."""
    @task.define(leaf=True)
    def corner(Y, X):
        task.compute(Y, lambda i, j: X[i + 0, (X.shape[1] - 1) - j] + X[0, j] + 0.0 * X[i, j])

    x = torch.randn(6, 13, generator=torch.Generator().manual_seed(4))
    out = _compile(corner, bm=8)(x)
    torch.testing.assert_close(out, x.flip(1) + x[:1])


def test_unguarded_stencil_is_refused_with_the_numbers():
    @task.define(leaf=True)
    def diff(Y, X):
        task.compute(Y, lambda i, j: X[i, j + 1] - X[i, j])

    with pytest.raises(septran.LoweringError) as info:
        _compile(diff)(torch.randn(5, 13))
    text = str(info.value)
    assert info.value.loc.line == _line(diff)
    assert "X[i, j + 1] reads X at 1..13 along dimension 1 (j runs over 0..12)" in text
    assert "holds 13 elements there (0..12)" in text and "whole dimension" in text


@pytest.mark.build
def test_one_tile_at_several_index_sets():
    """X + X^T: the square tile (BM = rows) holds every element; a tile of fewer rows is refused."""
    @task.define(leaf=True)
    def symmetric(Y, X):
        task.compute(Y, lambda i, j: X[i, j] + X[j, i])

    x = torch.randn(6, 6, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(_compile(symmetric, bm=6)(x), x + x.T)
    with pytest.raises(septran.LoweringError) as info:
        _compile(symmetric, bm=2)(x)
    assert "X[j, i] reads X at 0..5 along dimension 0" in str(info.value) and "holds 2 elements" in str(info.value)


@pytest.mark.build
def test_gather_through_a_tile_of_indices():
    """Y[i, j] = X[i, Ix[i, j]]: Ix holds whole numbers (float here); an index outside the row reads 0."""
    @task.define(leaf=True)
    def gather(Y, X, Ix):
        task.compute(Y, lambda i, j: X[i, Ix[i, j]])

    @task.define
    def rows(Y, X, Ix):
        task.launch(gather, Y, X, Ix)

    @task.define
    def host(Y, X, Ix):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        Ixp = task.partition(Ix, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0], Ixp[i, 0])

    mapping = rows_mapping("gather").replace("{Y: GLOBAL, X: GLOBAL}", "{Y: GLOBAL, X: GLOBAL, Ix: GLOBAL}")
    kernel = septran.compile(host, mapping=mapping)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(9, 5, generator=gen)
    t = torch.randint(-2, 8, (9, 4), generator=gen).float()
    inside = (t >= 0) & (t < 5)
    ref = torch.where(inside, x.gather(1, t.long().clamp(0, 4)), torch.zeros(()))
    torch.testing.assert_close(kernel(x, t), ref)


def test_gather_needs_the_whole_dimension():
    @task.define(leaf=True)
    def gather(Y, X):
        task.compute(Y, lambda i, j: X[i, X[i, j]])

    @task.define
    def cols(Y, X):
        task.launch(gather, Y, X)

    @task.define
    def host(Y, X):
        Yp = task.partition(Y, by="blocks", tile=(None, "BM"))
        Xp = task.partition(X, by="blocks", tile=(None, "BM"))
        for i in task.parallel_range(Yp.shape[1]):
            task.launch(cols, Yp[0, i], Xp[0, i])

    kernel = septran.compile(host, mapping=rows_mapping("gather").replace("rows", "cols"))
    with pytest.raises(septran.LoweringError) as info:
        kernel(torch.randn(3, 10))
    assert info.value.loc.line == _line(gather)
    assert "gathers X along dimension 1" in str(info.value) and "holds 4 of its 10 elements" in str(info.value)


@pytest.mark.build
def test_one_element_tensor_read_as_a_scalar():
    """A scale computed on the device (a (1,) tensor) read in a compute as s[0]: no host sync."""
    @task.define(leaf=True)
    def scale(Y, X, s):
        task.compute(Y, lambda i, j: X[i, j] / s[0])

    @task.define
    def rows(Y, X, s):
        task.launch(scale, Y, X, s)

    @task.define
    def host(Y, X, s):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0], s)

    mapping = rows_mapping("scale").replace("{Y: GLOBAL, X: GLOBAL}", "{Y: GLOBAL, X: GLOBAL, s: GLOBAL}")
    kernel = septran.compile(host, mapping=mapping)
    x = torch.randn(7, 9, generator=torch.Generator().manual_seed(6))
    s = x.abs().amax().reshape(1)
    torch.testing.assert_close(kernel(x, s), x / s)
    with pytest.raises(septran.LoweringError) as info:
        kernel(x, torch.ones(0))
    assert "reads s at 0..0 along dimension 0" in str(info.value)


@pytest.mark.parametrize("bad, phrase", [
    (lambda X: (lambda i, j: X[i + j, j]), "cannot add two indices"),
    (lambda X: (lambda i, j: X[i, j] * (j + 1)), "is not a value"),
    (lambda X: (lambda i, j: X[i, j] + X[i]), "X is read with 2 and 1 indices"),
    (lambda X: (lambda i, j: X[i, j] + X[i, j * X.shape[0]]), "an index is scaled by an integer only"),
])
def test_frontend_refuses_what_is_not_an_index(bad, phrase):
    @task.define(leaf=True)
    def leaf(Y, X):
        task.compute(Y, bad(X))

    with pytest.raises(septran.FrontendError) as info:
        _compile(leaf)
    assert phrase in str(info.value)
