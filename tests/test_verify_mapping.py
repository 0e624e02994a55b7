"""Issue 8: mapping mistakes the lowering used to take on faith, each refused at the mapping's line.

Each test runs one case of tests/verify_cases/cases.py (``SEPTRAN_TEST_ISOLATE=1``: in a child process).
"""
from __future__ import annotations

import pytest

from verify_cases.cases import run_case


def test_pipeline_on_an_instance_without_a_sequential_range_is_refused(tmp_path):
    run_case("pipeline_without_a_sequential_range", tmp_path)  # today: accepted without a word


@pytest.mark.build
def test_block_without_a_sequential_range_runs(tmp_path):
    run_case("pipeline_one_step_control", tmp_path)  # the control: same logic, no pipeline key


def test_a_tunable_the_logic_never_uses_is_refused_with_a_did_you_mean(tmp_path):
    run_case("unused_tunable", tmp_path)  # today: accepted without a word


def test_a_host_instance_launching_a_leaf_is_a_located_error(tmp_path):
    run_case("host_launches_a_leaf", tmp_path)  # today: a raw KeyError
