"""Calling a kernel with tensors that do not fit it: a CallError that says what to change."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, mapping_path


@pytest.fixture(scope="module")
def kernel():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))


def test_before_any_call_there_is_no_source():
    fresh = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    with pytest.raises(septran.CallError, match="not been specialised yet") as info:
        fresh.tilelang_source
    assert "kernel.specialize" in str(info.value)


def test_wrong_number_of_inputs(kernel):
    a = torch.randn(8, 8)
    with pytest.raises(septran.CallError, match=r"takes 2 inputs \(A, B\), got 3") as info:
        kernel(a, a, a)
    assert "outputs (C) are allocated and returned" in str(info.value)
    with pytest.raises(septran.CallError, match="missing input B"):
        kernel(a)


def test_input_that_is_not_a_tensor(kernel):
    with pytest.raises(septran.CallError, match="B must be a torch.Tensor, got list"):
        kernel(torch.randn(4, 4), [[1.0] * 4] * 4)


def test_unsupported_dtype(kernel):
    a = torch.ones(4, 4, dtype=torch.int32)
    with pytest.raises(septran.CallError, match="A has dtype int32; target cpu supports float16, float32"):
        kernel(a, a)


def test_mixed_dtypes(kernel):
    with pytest.raises(septran.CallError, match="share one dtype.*A: float32, B: float16"):
        kernel(torch.randn(4, 4), torch.randn(4, 4).half())


def test_wrong_rank_points_at_the_partition(kernel):
    with pytest.raises(septran.CallError, match=r"A must have rank 2 .* got shape \(4, 4, 4\)") as info:
        kernel(torch.randn(4, 4, 4), torch.randn(4, 4))
    assert info.value.loc.file == str(GEMM_LOGIC)
    assert "task.partition(A" in str(info.value)


def test_mismatched_inner_dimensions(kernel):
    with pytest.raises(septran.CallError, match=r"A.shape\[1\] is 32 but B.shape\[0\] is 33") as info:
        kernel(torch.randn(64, 32), torch.randn(33, 16))
    assert info.value.loc.file == str(GEMM_LOGIC)


def test_non_contiguous_input(kernel):
    with pytest.raises(septran.CallError, match=r"B is not contiguous") as info:
        kernel(torch.randn(8, 8), torch.randn(8, 8).t())
    assert "B.contiguous()" in str(info.value)


def test_tensor_on_the_wrong_device(kernel):
    with pytest.raises(septran.CallError, match="A is on meta, but target cpu runs on cpu tensors"):
        kernel(torch.empty(4, 4, device="meta"), torch.empty(4, 4, device="meta"))


def test_unknown_keyword(kernel):
    with pytest.raises(septran.CallError, match="has no input 'X'"):
        kernel(torch.randn(4, 4), X=torch.randn(4, 4))
