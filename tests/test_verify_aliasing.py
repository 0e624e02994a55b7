"""Issue 8, verification: no two staged buffers of one program alias one region of a parameter. RoPE's
pattern (a tile written whole, then as two halves) must be correct: a sub-tile of a staged tile is a view
into its buffer.

Runs tests/verify_cases/cases.py's case (``SEPTRAN_TEST_ISOLATE=1``: in a child process).
"""
from __future__ import annotations

import pytest

from verify_cases.cases import run_case

pytestmark = pytest.mark.build  # 1 of its 1 tests build kernels


def test_halves_written_after_the_whole_tile_are_correct(tmp_path):
    run_case("rope_halves_after_whole_correct", tmp_path)  # today: values up to 1e38 (uninitialised output)
