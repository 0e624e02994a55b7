"""Issue 8: legal programs never reach TileLang as code it cannot parse (a BuildError that says "this is
a SepTran bug"), and the generated source does not depend on the working directory.

Each test runs one case of tests/verify_cases/cases.py (``SEPTRAN_TEST_ISOLATE=1``: in a child process).
"""
from __future__ import annotations

import pytest

from verify_cases.cases import run_case

pytestmark = pytest.mark.build  # 3 of its 4 tests build kernels


def test_compute_in_an_empty_range_never_happens(tmp_path):
    run_case("compute_in_empty_range", tmp_path)


def test_nan_constant_gives_nan_where_torch_does(tmp_path):
    run_case("nan_constant", tmp_path)  # today: `nan` printed, NameError in TileLang (a BuildError)


def test_one_element_read_is_correct_or_located(tmp_path):
    run_case("one_element_read", tmp_path)  # today: `s_local[]`, SyntaxError in TileLang (a BuildError)


def test_source_does_not_depend_on_the_working_directory(tmp_path):
    run_case("source_independent_of_cwd", tmp_path)  # today: the header's paths follow the cwd
