"""The quick tier's guard (tests/support/build_guard.py) fails an unmarked test that starts a build, even one
whose code swallows the error, and leaves a marked test the real entry points."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_the_guard_fails_unmarked_tests_that_build():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPTRAN_TEST_GUARD")}  # not a sweep's
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfE",
                          "tests/support/guard_cases.py"], cwd=REPO, env=env, capture_output=True, text=True)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    assert "FAILED tests/support/guard_cases.py::test_unmarked_build_fails" in out
    assert "FAILED tests/support/guard_cases.py::test_unmarked_build_swallowed_still_fails" in out
    assert "started a build (septran.build.shared_lib.built) but is not marked" in out, out
