"""Cases for tests/test_build_guard.py, run by it in a pytest of their own (not collected by the suite: the name
does not start with test_). The guard stands in front of the build, so nothing here compiles anything."""
import pytest

from septran.build import job, shared_lib


def test_unmarked_build_fails():
    job.Job.binary(None)


def test_unmarked_build_swallowed_still_fails():
    try:
        shared_lib.built("c", "x", "0", lambda out, src: ["true"], "nothing")
    except Exception:  # noqa: BLE001 - as the model backend does: the guard must fail the test anyway
        pass


@pytest.mark.build
def test_marked_test_sees_the_real_entry_points():
    assert job.Job.binary.__module__ == "septran.build.job" and job.Job.binary.__name__ == "binary"


def test_unmarked_test_that_builds_nothing_passes():
    assert job.Job.binary.__name__ == "refuse"
