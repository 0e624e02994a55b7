"""Seeded mapping fuzzer: every mutation of a shipped mapping loads, or fails with a located SepTranError.

Mutations (bench/fuzz_mutate.py): byte flips, deletions, control characters,
tags, odd and huge numbers, deep nesting, renamed keys, swapped values,
re-encodings. A sample of the accepted ones for the cpu target is run and
compared with torch. bench/fuzz.py runs the same at scale, with crash and
hang detection.
"""
from __future__ import annotations

import pytest

import collections

from conftest import REPO, load_module

pytestmark = pytest.mark.build  # 1 of its 1 tests build kernels

CASES = 1500  # about 20 s here with a warm cache; a cold one adds the builds of RUN_AT_MOST cpu kernels
RUN_AT_MOST = 10  # accepted cpu cases run against torch


def test_mapping_mutations_load_or_fail_located():
    fuzz = load_module(REPO / "bench" / "fuzz_case.py")
    counts, ran = collections.Counter(), 0
    for case in fuzz.mapping_cases(CASES, seed=2024):
        case["run"] = case["target"] == "cpu" and ran < RUN_AT_MOST
        result = fuzz.run_case(case)
        ran += result["outcome"] in ("correct", "wrong")
        counts[result["outcome"]] += 1
        assert result["outcome"] in ("correct", "accepted", "located"), f"{case['mutation']}: {result}"
    assert counts["located"] > CASES // 2 and counts["accepted"] + counts["correct"] > 0, counts
