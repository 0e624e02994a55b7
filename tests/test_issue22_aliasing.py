"""Issue 22, aliasing and views like torch: every tensor the kernel writes (passed outputs and in-out parameters)
is checked against every other argument for shared memory, on the first call and on every call of a cached plan;
a lazy negative view (torch._neg_view) is materialised where it is read and refused where it is written (the
kernel read its storage: the wrong sign); a conjugate view is complex, which no target takes."""
from __future__ import annotations

import pytest
import torch

import septran
from septran import task
from conftest import GEMM_LOGIC, mapping_path
from support.rows import rows_logic, rows_mapping

pytestmark = pytest.mark.build  # every test here builds (or finds built) kernels


@task.define(leaf=True)
def add_into(Y, X):
    task.compute(Y, lambda i, j: Y[i, j] + X[i, j])


@pytest.fixture(scope="module")
def add():
    """Y += X: Y is an in-out parameter (read and written), passed positionally."""
    return septran.compile(rows_logic(add_into), mapping=rows_mapping("add_into"), target="cpu")


@pytest.fixture(scope="module")
def gemm():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))


def _overlapping(rows: int, cols: int, shift: int):
    """Two contiguous (rows, cols) tensors of one storage, the second ``shift`` elements further."""
    base = torch.randn(rows * cols + shift)
    return base[: rows * cols].view(rows, cols), base[shift: shift + rows * cols].view(rows, cols)


@pytest.mark.parametrize("shift", [0, 7, 34])
def test_an_in_out_parameter_overlapping_an_input_is_refused(add, shift):
    """With 2 threads the result changed from run to run; torch refuses partially overlapping in-place ops."""
    y, x = _overlapping(5, 7, shift)
    with pytest.raises(septran.CallError, match="in-out parameter Y shares memory with X"):
        add(y, x)


def test_the_check_holds_on_every_call_of_a_cached_plan(add):
    y, x = torch.zeros(5, 7), torch.randn(5, 7)
    add(y, x)  # the plan of this signature is made and cached
    torch.testing.assert_close(y, x)
    y2, x2 = _overlapping(5, 7, 3)
    with pytest.raises(septran.CallError, match="in-out parameter Y shares memory with X"):
        add(y2, x2)
    with pytest.raises(septran.CallError, match=r"shares memory with X \(the same elements\)"):
        add(y, y)


def test_separate_tensors_of_one_storage_are_fine(add):
    base = torch.zeros(70)
    y, x = base[:35].view(5, 7), base[35:].view(5, 7)
    x.copy_(torch.arange(35.0).view(5, 7))
    add(y, x)
    torch.testing.assert_close(y, x)


def test_a_passed_output_overlapping_an_input_is_refused_on_a_cached_plan(gemm):
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    gemm(a, b, C=torch.empty(16, 16))
    c, a2 = _overlapping(16, 16, 5)
    with pytest.raises(septran.CallError, match="output C shares memory with A"):
        gemm(a2, b, C=c)


def test_a_negative_view_read_is_materialised(add, gemm):
    x = torch.randn(5, 7)
    y = torch.zeros(5, 7)
    add(y, torch._neg_view(x))  # first call of the signature: bound from scratch
    torch.testing.assert_close(y, -x)
    add(y, torch._neg_view(x))  # the cached plan's fast path
    torch.testing.assert_close(y, -2 * x)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    gemm(a, b)
    torch.testing.assert_close(gemm(torch._neg_view(a), b), -(a @ b), rtol=1e-4, atol=1e-4)
    assert torch._neg_view(a).is_neg()  # the caller's view is left as it was


def test_a_negative_view_written_is_refused(add, gemm):
    y, x = torch.zeros(5, 7), torch.randn(5, 7)
    add(y, x)
    with pytest.raises(septran.CallError, match="Y has torch's negative bit set"):
        add(torch._neg_view(y), x)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    with pytest.raises(septran.CallError, match="C has torch's negative bit set"):
        gemm(a, b, C=torch._neg_view(torch.empty(16, 16)))


def test_a_conjugate_view_is_complex_and_refused_by_its_dtype(add):
    x = torch.randn(5, 7, dtype=torch.complex64).conj()
    assert x.is_conj()
    with pytest.raises(septran.CallError, match="dtype complex64"):
        add(torch.zeros(5, 7, dtype=torch.complex64), x)
