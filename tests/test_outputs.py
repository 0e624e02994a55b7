"""Outputs passed by name (issue 12, item 2): ``kernel(a, b, C=c)`` writes into ``c``, checked first."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from conftest import GEMM_LOGIC, mapping_path


@pytest.fixture(scope="module")
def gemm():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))


@pytest.mark.build
def test_a_passed_output_is_written_and_returned(gemm):
    a, b = torch.randn(33, 20), torch.randn(20, 17)
    c = torch.full((33, 17), float("nan"))
    assert gemm(a, b, C=c) is c
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.build
def test_positional_calls_stay_right_around_passed_outputs(gemm):
    """A positional call's plan allocates; a call with C= (its own plan) in between does not disturb it."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    first = gemm(a, b)
    c = torch.empty(8, 8)
    assert gemm(a, b, C=c) is c
    second = gemm(a, b)
    assert second is not c and second is not first
    torch.testing.assert_close(second, a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make, message", [
    (lambda: torch.empty(33, 18), "the logic needs them equal"),
    (lambda: torch.empty(33, 17, dtype=torch.float64), "C has dtype float64"),
    (lambda: torch.empty(17, 33).t(), "C is not contiguous"),
    (lambda: torch.empty(33), "C must have rank 2"),
    (lambda: [[0.0] * 17] * 33, "C must be a torch.Tensor"),
])
def test_a_passed_output_is_checked(gemm, make, message):
    with pytest.raises(septran.CallError, match=message):
        gemm(torch.randn(33, 20), torch.randn(20, 17), C=make())


def test_an_output_that_shares_memory_with_an_input_is_refused(gemm):
    a = torch.randn(16, 16)
    with pytest.raises(septran.CallError, match="output C shares memory with A"):
        gemm(a, torch.randn(16, 16), C=a)


def test_an_unknown_name_lists_inputs_and_outputs(gemm):
    with pytest.raises(septran.CallError, match="has no input or output 'D'") as info:
        gemm(torch.randn(4, 4), torch.randn(4, 4), D=torch.empty(4, 4))
    assert "outputs: C" in str(info.value)


def untied_logic():
    """Y[i, j] = X[i] * j: Y's second dimension is tied to no input, so only a passed Y gives it."""

    @task.define(leaf=True)
    def fill(Y, X):
        task.compute(Y, lambda i, j: X[i] * task.global_index(Y, 1, j))

    @task.define
    def rows(Y, X):
        task.launch(fill, Y, X)

    @task.define
    def host(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM",))
        for i in task.parallel_range(Yp.shape[0]):
            task.launch(rows, Yp[i, 0], Xp[i])

    return host


UNTIED = """
target: cpu
entrypoint: host
task_mappings:
  host: {task_name: host, proc: HOST, mems: {Y: GLOBAL, X: GLOBAL}, tunables: {BM: 4}, calls: {rows: blk}}
  blk: {task_name: rows, proc: BLOCK, mems: {Y: GLOBAL, X: GLOBAL}, leaf_task_bindings: {fill: vector_loops}}
"""


@pytest.mark.build
def test_an_untied_output_takes_its_shape_from_the_passed_tensor():
    k = septran.compile(untied_logic(), UNTIED)
    x = torch.randn(10)
    with pytest.raises(septran.CallError, match="cannot tell the shape of output Y") as info:
        k(x)
    assert "pass it by name (Y=...)" in str(info.value)
    for cols in (3, 7):
        y = torch.empty(10, cols, dtype=torch.float16)
        assert k(x, Y=y) is y
        torch.testing.assert_close(y, (x[:, None] * torch.arange(cols)).half())


def test_specialize_takes_outputs_too():
    k = septran.compile(untied_logic(), UNTIED)
    v = k.specialize(X=((10,), "float32"), Y=((10, 6), "float16"))
    assert v.spec.shapes["Y"] == (10, 6) and v.spec.dtypes["Y"] == "float16"


@pytest.mark.build
def test_a_passed_accumulator_starts_from_zeros(tmp_path):
    """C += A @ B straight into a passed C (kept in global memory): its old contents never count."""
    from conftest import edited_mapping

    path = edited_mapping(tmp_path, "cpu", "gemm", ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: GLOBAL, A: GLOBAL, B: GLOBAL}"))
    k = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    a, b = torch.randn(30, 70), torch.randn(70, 26)
    c = torch.full((30, 26), 5.0)
    assert k(a, b, C=c) is c
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)
    c.fill_(5.0)  # the second call runs the signature's plan: it zeroes the accumulator again
    assert k(a, b, C=c) is c
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.build
def test_keyword_calls_are_planned_as_positional_ones(gemm):
    """One plan per call signature (positional, keyword, keyword output), all running the one variant."""
    a, b, c = torch.randn(12, 8), torch.randn(8, 4), torch.empty(12, 4)
    before = len(gemm._plans)
    for _ in range(3):
        torch.testing.assert_close(gemm(a, b), a @ b, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(gemm(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)
        assert gemm(a, b, C=c) is c and gemm(a, B=b, C=c) is c
        torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    plans = list(gemm._plans.values())[before:]
    assert len(plans) == 4 and len({id(p.variant) for p in plans}) == 1 and gemm.latest is plans[0].variant


@pytest.mark.build
def test_a_planned_signature_still_checks_each_call(gemm):
    """What the signature does not fix is checked per call: shared memory, layout, device."""
    a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
    gemm(a, b, C=c)
    with pytest.raises(septran.CallError, match="output C shares memory with A"):
        gemm(a, b, C=a)
    with pytest.raises(septran.CallError, match="output C shares memory with B"):
        gemm(a, b, C=b.view(16, 16))
    with pytest.raises(septran.CallError, match="C is not contiguous"):
        gemm(a, b, C=torch.empty(16, 16).t())
    with pytest.raises(septran.CallError, match="A is not contiguous"):
        gemm(torch.randn(16, 16).t(), b)
    torch.testing.assert_close(gemm(a, b, C=c), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.build
def test_converted_types_are_planned_too(gemm):
    """bfloat16 on the cpu target is computed in float32: a plan converts the inputs, and a passed bfloat16
    output gets the result copied back; allocated outputs come back as bfloat16."""
    a, b = torch.randn(20, 12).bfloat16(), torch.randn(12, 8).bfloat16()
    want = (a.float() @ b.float()).bfloat16()
    for _ in range(2):
        out = gemm(a, b)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
        c = torch.full((20, 8), float("nan"), dtype=torch.bfloat16)
        assert gemm(a, b, C=c) is c
        torch.testing.assert_close(c, want, rtol=2e-2, atol=2e-2)
