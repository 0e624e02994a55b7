"""Errors in temps, task.compute and their mappings: a clear message at the user's line."""
from __future__ import annotations

import pytest

import septran
from conftest import SOFTMAX_WITHOUT_TEMPS, REPO, edited_mapping, forbid_tilelang
from septran.frontend import build_graph
from test_errors_logic import check, load

SOFTMAX = REPO / "septran" / "ops" / "logic" / "softmax.py"


@pytest.mark.parametrize("function, marker, phrases", [
    ("compute_not_leaf", "not a leaf", ("uses task.compute but is not a leaf task", "leaf=True")),
    ("temp_in_leaf", "temp in leaf", ("leaf task temp_in_leaf cannot allocate a temp",)),
    ("temp_unnamed", "unnamed temp", ("assign the temp to a new name",)),
    ("stencil", "stencil", ("moves with one index", "cannot add two indices")),
    ("index_as_value", "index as value", ("index j is not a value", "task.global_index")),
    ("two_orders", "two orders", ("X is read with 2 and 1 indices; a tile has one rank",)),
    ("output_transposed", "output transposed", ("the output is read at [j, i], not at its own indices [i, j]",)),
    ("bad_arity", "arity", ("task.exp takes 1 argument, got 2",)),
    ("size_of_a_tile", "size of a tile", ("task.global_size takes a parameter of this task, not a tile of one",)),
    ("bad_scalar_arg", "scalar arg", ("s of scaled must be a number or a scalar parameter, got str",)),
])
def test_compute_and_temp_errors(function, marker, phrases):
    with pytest.raises(septran.FrontendError) as info:
        build_graph(getattr(load("bad_compute"), function))
    check(info.value, "bad_compute", marker, *phrases)


def _softmax_mapping(tmp_path, old: str, new: str):
    path = edited_mapping(tmp_path, "cpu", "softmax_online", (old, new))
    return path, path.read_text().splitlines()


def test_temp_without_a_memory_is_refused_at_the_mems_line(tmp_path, monkeypatch):
    forbid_tilelang(monkeypatch, "a temp with no memory must be refused before TileLang")
    path, lines = _softmax_mapping(tmp_path, ", S: LOCAL}", "}")
    with pytest.raises(septran.MappingError) as info:
        septran.compile(logic_file=SOFTMAX, mapping_file=path)
    err = info.value
    assert err.loc.file == str(path) and "mems:" in lines[err.loc.line - 1]
    assert "softmax_rows allocates temp S (logic " in str(err) and "softmax.py:" in str(err)
    assert "add `S: <memory>` to mems" in str(err)


def test_temp_in_global_memory_is_refused(tmp_path):
    path, lines = _softmax_mapping(tmp_path, "S: LOCAL", "S: GLOBAL")
    kernel = septran.compile(logic_file=SOFTMAX, mapping_file=path)
    with pytest.raises(septran.LoweringError, match="temp S cannot live in GLOBAL") as info:
        kernel.specialize(X=((4, 300), "float32"))
    assert "S: GLOBAL" in lines[info.value.loc.line - 1]


def test_binding_must_implement_every_primitive_of_the_leaf(tmp_path):
    path, lines = _softmax_mapping(tmp_path, "softmax_stats: vector_loops", "softmax_stats: gemm_leaf_cpu")
    with pytest.raises(septran.MappingError) as info:
        septran.compile(logic_file=SOFTMAX, mapping_file=path)
    text = str(info.value)
    assert "gemm_leaf_cpu implements gemm, but softmax_stats calls 'compute' (elementwise, " in text
    assert "'row_max' (reduce, " in text and "split the leaf" in text
    assert "gemm_leaf_cpu" in lines[info.value.loc.line - 1]


def test_global_size_past_the_rank_is_refused(tmp_path):
    from septran import task

    @task.define(leaf=True)
    def far(Y, X):
        task.compute(Y, lambda i, j: X[i, j] / task.global_size(X, 5))

    @task.define
    def rows(Y, X):
        Xp = task.partition(X, by="blocks", tile=(None, "BN"))
        Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
        for k in task.range(Xp.shape[1]):
            task.launch(far, Yp[0, k], Xp[0, k])

    @task.define
    def softmax_logic(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0])

    path = edited_mapping(tmp_path, "cpu", "softmax_online", ("softmax_rows", "rows"), SOFTMAX_WITHOUT_TEMPS,
                          ("{softmax_start: vector_loops, softmax_stats: vector_loops, softmax_write: vector_loops}", "{far: vector_loops}"))
    kernel = septran.compile(softmax_logic, mapping_file=path)
    with pytest.raises(septran.LoweringError, match=r"global_size\(X, 5\): the tile has 2 dimensions"):
        kernel.specialize(X=((4, 300), "float32"))


def test_scalar_of_another_task_is_refused():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_compute").make_leaked_scalar())
    check(info.value, "bad_compute", "leaked scalar", "eps is a scalar of another task", "pass it in the launch")


def test_a_scalar_default_must_be_a_number():
    with pytest.raises(septran.FrontendError, match="parameter 'flag' must be a plain positional parameter"):
        load("bad_scalar_default")


def test_tensor_of_another_task_is_refused():
    with pytest.raises(septran.FrontendError) as info:
        build_graph(load("bad_compute").make_leaked_tensor())
    check(info.value, "bad_compute", "leaked tensor", "X is not a parameter of inner", "add X to inner's parameters")
