"""Issue 22, errors that name the culprit: each finding gives a located error at the user's line, or the IEEE
result torch gives."""
from __future__ import annotations

import textwrap

import pytest
import torch

import septran

# An elementwise kernel whose compute is EXPR: one BM x BN tile per program, read and written in place.
ELEMENTWISE = '''
from septran import task

@task.define(leaf=True)
def ew_leaf(Y, X):
    task.compute(Y, lambda i, j: EXPR)

@task.define
def ew_block(Y, X):
    task.launch(ew_leaf, Y, X)

@task.define
def ew_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(ew_block, Yp[i, j], Xp[i, j])
'''
EW_MAPPING = '''
target: cpu
entrypoint: h
task_mappings:
  h:
    task_name: ew_logic
    proc: HOST
    mems: {"*": GLOBAL}
    tunables: {BM: 8, BN: 16}
    calls: {ew_block: b}
  b:
    task_name: ew_block
    proc: BLOCK
    mems: {"*": GLOBAL}
    leaf_task_bindings: {ew_leaf: vector_loops}
'''


def _elementwise(tmp_path, expr: str):
    logic, mapping = tmp_path / "ew.py", tmp_path / "ew.yaml"
    logic.write_text(ELEMENTWISE.replace("EXPR", expr))
    mapping.write_text(EW_MAPPING)
    return logic, septran.compile(logic_file=logic, mapping_file=mapping)


def _line_of(path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("expr, reference", [
    ("X[i, j] / 0.0", lambda x: x / 0.0),
    ("X[i, j] / -0.0", lambda x: x / -0.0),
    ("X[i, j] / 0", lambda x: x / 0),
    ("X[i, j] * 1e300", lambda x: x * 1e300),  # beyond float32: infinities, as torch rounds it
])
def test_a_division_by_the_constant_zero_gives_ieee_results_like_torch(tmp_path, expr, reference):
    _, kernel = _elementwise(tmp_path, expr)
    x = torch.randn(20, 30)
    x[0, :4] = torch.tensor([0.0, float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(kernel(x), reference(x), equal_nan=True)


@pytest.mark.parametrize("expr, dtype, error, phrase", [
    ("X[i, j] * 10 ** 400", torch.float32, septran.FrontendError, "does not fit in 64 bits"),
    ("X[i, j] * 2 ** 70", torch.float32, septran.FrontendError, "does not fit in 64 bits"),
    ("X[i, j] * 2 ** 40", torch.int32, septran.LoweringError, "does not fit in int32"),
    ("X[i, j] // 0", torch.int32, septran.LoweringError, "by the constant 0"),
    ("X[i, j] % 0", torch.int32, septran.LoweringError, "by the constant 0"),
])
def test_a_constant_out_of_range_is_refused_at_the_compute_line(tmp_path, expr, dtype, error, phrase):
    x = torch.arange(600, dtype=dtype).reshape(20, 30)
    with pytest.raises(error, match=phrase) as info:
        logic, kernel = _elementwise(tmp_path, expr)
        kernel(x)
    assert info.value.loc is not None and info.value.loc.file == str(tmp_path / "ew.py")
    assert info.value.loc.line == _line_of(tmp_path / "ew.py", "task.compute(Y")
