"""Every one-argument element function of task.compute, run on the cpu against torch (special values included)."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from septran.frontend import elementwise as el

MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host: {task_name: host, proc: HOST, mems: {Y: GLOBAL, X: GLOBAL}, tunables: {BM: 4}, calls: {rows: blk}}
  blk: {task_name: rows, proc: BLOCK, mems: {Y: GLOBAL, X: GLOBAL}, leaf_task_bindings: {apply: vector_loops}}
"""

TORCH = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
         "rsqrt": torch.rsqrt, "erf": torch.erf, "tanh": torch.tanh, "abs": torch.abs}
SPECIAL = [float("-inf"), float("inf"), float("nan"), 0.0, -0.0, -1.0, 1e-40, -100.0, 88.8, -150.0, 128.0]


def _kernel(fn: str, tmp_path):
    element = getattr(task, fn)

    @task.define(leaf=True)
    def apply(Y, X):
        task.compute(Y, lambda i, j: element(X[i, j]))

    @task.define
    def rows(Y, X):
        task.launch(apply, Y, X)

    @task.define
    def host(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i, 0])

    path = tmp_path / "m.yaml"
    path.write_text(MAPPING)
    return septran.compile(host, mapping_file=path)


def test_every_one_argument_function_is_covered():
    assert {fn for fn, (arity, _) in el.FUNCTIONS.items() if arity == 1} == set(TORCH)


@pytest.mark.parametrize("fn", sorted(TORCH))
def test_function_matches_torch(fn, tmp_path):
    gen = torch.Generator().manual_seed(len(fn))
    x = torch.randn(7, 45, generator=gen) * 4
    x.view(-1)[: len(SPECIAL)] = torch.tensor(SPECIAL)
    out = _kernel(fn, tmp_path)(x)
    ref = TORCH[fn](x.double()).float().double()  # float64, rounded to float32: overflow is inf there
    torch.testing.assert_close(out.double(), ref, rtol=2e-6, atol=1e-6, equal_nan=True)
