"""Issue 8, verification: every tile index stays in its partition's grid on every iteration, and loop
extents are >= 0. A mistake is a LoweringError at the launch (or range) line naming the reached index and
the grid's extent; a loop of no iterations is legal and emits valid code.

Each test runs one case of tests/verify_cases/cases.py (``SEPTRAN_TEST_ISOLATE=1``: in a child process;
``python tests/verify_cases/cases.py <case>`` runs one alone).
"""
from __future__ import annotations

import pytest

from verify_cases.cases import run_case


def test_bmm_batch_tile_index_far_outside_the_grid_is_refused(tmp_path):
    run_case("bmm_batch_index_far_outside", tmp_path)  # today: SIGSEGV when run (the offset wraps in 32 bits)


def test_gemm_a_tile_at_k_minus_one_is_refused(tmp_path):
    run_case("gemm_a_tile_k_minus_one", tmp_path)  # today: runs, wrong numbers


def test_gemm_b_tile_at_k_minus_one_is_refused(tmp_path):
    run_case("gemm_b_tile_k_minus_one", tmp_path)


def test_gemm_constant_tile_index_minus_one_is_refused(tmp_path):
    run_case("gemm_constant_minus_one", tmp_path)


def test_gemm_negative_range_is_refused(tmp_path):
    run_case("gemm_range_negative", tmp_path)


@pytest.mark.build
def test_gemm_empty_range_gives_zeros(tmp_path):
    run_case("gemm_range_zero", tmp_path)  # passes today; must stay legal


@pytest.mark.build
def test_grouped_query_attention_with_divisible_heads_is_correct(tmp_path):
    run_case("gqa_divisible_heads_correct", tmp_path)  # passes today; must stay legal


def test_grouped_query_attention_past_the_last_kv_head_is_refused(tmp_path):
    run_case("gqa_heads_not_divisible_refused", tmp_path)  # today: one head silently zeros
