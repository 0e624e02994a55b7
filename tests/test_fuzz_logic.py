"""Seeded logic fuzzer: every mutation of an example logic file that the tracer must handle gives the
operator's correct result or a located SepTranError, never another exception.

Mutations (bench/fuzz_mutate.py, family ``tracer``): invalid constants
(10**400, 2**31, 1.5, 'x'), names replaced by undefined ones or by values of
the wrong kind (None, print, T, lambda...), an inserted ``raise``, broken
syntax, a deleted token, a second ``@task.define``. Index mutations
(``k`` -> ``k - 1``) are left to bench/fuzz.py: refusing them is the
lowering's bounds verification.
"""
from __future__ import annotations

import pytest

import collections

from conftest import REPO, load_module

pytestmark = pytest.mark.build  # 1 of its 1 tests build kernels

CASES = 1500  # about 20 s with a warm cache


def test_logic_mutations_run_correctly_or_fail_located():
    fuzz = load_module(REPO / "bench" / "fuzz_case.py")
    counts = collections.Counter()
    for case in fuzz.logic_cases(CASES, seed=2024, families=("tracer",)):
        result = fuzz.run_case(case)
        counts[result["outcome"]] += 1
        assert result["outcome"] in ("correct", "located"), f"{case['mutation']}: {result}"
    assert counts["located"] > CASES // 2, counts
