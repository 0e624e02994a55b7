"""Every one-argument element function of task.compute, run on the cpu against torch (special values included)."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from septran.frontend import elementwise as el
from support.rows import rows_logic, rows_mapping

TORCH = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
         "rsqrt": torch.rsqrt, "erf": torch.erf, "tanh": torch.tanh, "abs": torch.abs}
SPECIAL = [float("-inf"), float("inf"), float("nan"), 0.0, -0.0, -1.0, 1e-40, -100.0, 88.8, -150.0, 128.0]


def _kernel(fn: str):
    element = getattr(task, fn)

    @task.define(leaf=True)
    def apply(Y, X):
        task.compute(Y, lambda i, j: element(X[i, j]))

    return septran.compile(rows_logic(apply), rows_mapping("apply"))


def test_every_one_argument_function_is_covered():
    assert {fn for fn, (arity, _) in el.FUNCTIONS.items() if arity == 1} == set(TORCH)


@pytest.mark.parametrize("fn", sorted(TORCH))
@pytest.mark.build
def test_function_matches_torch(fn):
    gen = torch.Generator().manual_seed(len(fn))
    x = torch.randn(7, 45, generator=gen) * 4
    x.view(-1)[: len(SPECIAL)] = torch.tensor(SPECIAL)
    out = _kernel(fn)(x)
    ref = TORCH[fn](x.double()).float().double()  # float64, rounded to float32: overflow is inf there
    torch.testing.assert_close(out.double(), ref, rtol=2e-6, atol=1e-6, equal_nan=True)
