"""Issue 8, verification: an index name shared by two tiles ties their extents (the README's einsum rule,
for tiles as for tensors), and gemm's letters m, n, k tie its operands. A mistake is a LoweringError at
the compute or launch line that names the extents, before any TileLang runs.

Each test runs one case of tests/verify_cases/cases.py (``SEPTRAN_TEST_ISOLATE=1``: in a child process;
``python tests/verify_cases/cases.py <case>`` runs one alone).
"""
from __future__ import annotations

import pytest

from verify_cases.cases import run_case


def test_softmax_write_with_swapped_lambda_parameters_is_refused(tmp_path):
    run_case("softmax_swapped_lambda", tmp_path)  # today: compiles, SIGSEGV when run


def test_rmsnorm_write_with_swapped_lambda_parameters_is_refused(tmp_path):
    run_case("rmsnorm_swapped_lambda", tmp_path)  # today: compiles, SIGSEGV when run


def test_gemm_with_swapped_operand_tiles_square_is_refused(tmp_path):
    run_case("gemm_swapped_operands_square", tmp_path)  # today: runs, wrong result


def test_gemm_with_swapped_operand_tiles_rectangular_is_refused(tmp_path):
    run_case("gemm_swapped_operands_rectangular", tmp_path)  # today: a BuildError of TileLang internals when run


@pytest.mark.build
def test_epilogue_bias_by_column_as_a_compute_is_correct(tmp_path):
    run_case("epilogue_bias_by_column_correct", tmp_path)  # the control of the next test


def test_epilogue_bias_by_row_is_refused(tmp_path):
    run_case("epilogue_bias_by_row_refused", tmp_path)  # today: reads past the bias tile
