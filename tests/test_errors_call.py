"""Calling a cpu kernel with tensors that do not fit it: a CallError that says what to change.

Every argument error is raised before anything is compiled: the build is
patched to fail, so a check that came too late would show up here (and the
file stays fast: no TileLang compile at all).
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, forbid_tilelang, mapping_path

CPU_MAPPING = mapping_path("cpu")


@pytest.fixture(autouse=True)
def nothing_is_built(monkeypatch):
    forbid_tilelang(monkeypatch, "the kernel was built for a call SepTran should have refused")


@pytest.fixture(scope="module")
def kernel():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=CPU_MAPPING)


def logic_line(text: str) -> int:
    """The line of examples/gemm/gemm.py that contains ``text`` (exactly one)."""
    hits = [i for i, t in enumerate(GEMM_LOGIC.read_text().splitlines(), 1) if text in t]
    assert len(hits) == 1, f"{text!r} must occur once in {GEMM_LOGIC}"
    return hits[0]


def check_at_logic(err: septran.CallError, line: int, *phrases: str) -> None:
    """A call error explained by the logic: at that line of gemm.py, shown with a caret."""
    assert err.loc is not None and (err.loc.file, err.loc.line) == (str(GEMM_LOGIC), line), f"{err.loc}:\n{err}"
    text = str(err)
    assert text.startswith(f"{GEMM_LOGIC}:{line}: call error: "), text
    source = GEMM_LOGIC.read_text().splitlines()[line - 1]
    rendered = text.splitlines()
    assert rendered[1] == "    " + source and rendered[2].strip() == "^", f"no source line and caret:\n{text}"
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"


def check_no_loc(err: septran.CallError, *phrases: str) -> None:
    """A call error about the arguments alone: no logic line to show, a plain message and a hint."""
    text = str(err)
    assert err.loc is None and text.startswith("call error: "), text
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"


def test_before_any_call_there_is_no_source():
    fresh = septran.compile(logic_file=GEMM_LOGIC, mapping_file=CPU_MAPPING)
    for attr in ("tilelang_source", "device_source"):
        with pytest.raises(septran.CallError) as info:
            getattr(fresh, attr)
        check_no_loc(info.value, "this kernel has not been specialised yet", "kernel.specialize(")
    with pytest.raises(septran.CallError, match="not been specialised yet"):
        fresh.explain()


def test_wrong_number_of_inputs(kernel):
    a = torch.randn(8, 8)
    with pytest.raises(septran.CallError) as info:
        kernel(a, a, a)
    check_no_loc(info.value, "gemm_host_logic takes 2 inputs (A, B), got 3", "outputs (C) are allocated and returned")
    with pytest.raises(septran.CallError) as info:
        kernel(a)
    check_no_loc(info.value, "missing input B", "call with (A, B)")


def test_unknown_keyword(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(4, 4), X=torch.randn(4, 4))
    check_no_loc(info.value, "gemm_host_logic has no input or output 'X'", "inputs: A, B")


def test_input_that_is_not_a_tensor(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(4, 4), [[1.0] * 4] * 4)
    check_no_loc(info.value, "B must be a torch.Tensor, got list")


def test_unsupported_dtype(kernel):
    a = torch.ones(4, 4, dtype=torch.float64)
    with pytest.raises(septran.CallError) as info:
        kernel(a, a)
    check_no_loc(info.value, "A has dtype float64; target cpu supports float16, bfloat16, float32, int32, int64, bool",
                 "x.to(torch.float16)")


def test_integer_operands_of_a_matrix_unit(kernel):
    """Each input has its own dtype now; a gemm refuses integer tiles at the logic's call, before a build."""
    with pytest.raises(septran.LoweringError) as info:
        kernel(torch.ones(4, 4, dtype=torch.int32), torch.randn(4, 4))
    assert "gemm takes floating-point tiles, but A" in str(info.value) and "int32" in str(info.value)
    assert info.value.loc is not None and info.value.loc.file == str(GEMM_LOGIC)


def test_mixed_float_operands_of_a_matrix_unit(kernel):
    with pytest.raises(septran.LoweringError) as info:
        kernel(torch.randn(4, 4), torch.randn(4, 4).half())
    assert "gemm reads its operands in one element type, but A is float32, B is float16" in str(info.value)


def test_wrong_rank_points_at_the_partition(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(4, 4, 4), torch.randn(4, 4))
    check_at_logic(info.value, logic_line('Ap = task.partition(A, by="blocks", tile=("BM", None))'),
                   "A must have rank 2 (the logic partitions it so), got shape (4, 4, 4)")


def test_mismatched_inner_dimensions(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(64, 32), torch.randn(33, 16))
    err = info.value
    assert err.loc is not None and err.loc.file == str(GEMM_LOGIC), err
    check_at_logic(err, err.loc.line, "A.shape[1] is 32 but B.shape[0] is 33", "the logic needs them equal")
    assert "Bp" in err.loc.source_line() and "Ap" in err.loc.source_line(), "the line shown must involve A and B"


def test_mismatched_inner_dimensions_points_at_the_line_that_ties_them(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(64, 32), torch.randn(33, 16))
    assert info.value.loc.line == logic_line("Ap[0, k], Bp[k, 0]")


def test_non_contiguous_input(kernel):
    b = torch.randn(16, 8).t()  # a transposed view: 8x16 with strides (1, 8)
    with pytest.raises(septran.CallError) as info:
        kernel(torch.randn(8, 8), b)
    check_no_loc(info.value, "B is not contiguous", "pass B.contiguous()")


def test_tensor_on_the_wrong_device(kernel):
    with pytest.raises(septran.CallError) as info:
        kernel(torch.empty(4, 4, device="meta"), torch.empty(4, 4, device="meta"))
    check_no_loc(info.value, "A is on meta, but target cpu runs on cpu tensors", ".to('cpu')")


def test_specialize_without_an_input(kernel):
    """Issue 22: located at the caller's line (it had no location)."""
    with pytest.raises(septran.CallError) as info:
        kernel.specialize(A=((8, 8), "float32"))
    err = info.value
    assert err.loc is not None and err.loc.file == __file__ and "kernel.specialize(A=" in open(__file__).read().splitlines()[err.loc.line - 1]
    assert "specialize() needs input B" in str(err) and "inputs: A, B" in str(err)
