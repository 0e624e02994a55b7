"""Cases for tests/test_build_guard.py, run by it in a pytest of their own (not collected by the suite: the name
does not start with test_). The guard stands in front of the build, so nothing here compiles anything."""
import pytest

from septran.runtime import c_build, shared_lib


def test_unmarked_build_fails():
    c_build.build(None, "", None)


def test_unmarked_build_swallowed_still_fails():
    try:
        shared_lib.built("c", "x", "0", lambda out, src: ["true"], "nothing")
    except Exception:  # noqa: BLE001 - as the model backend does: the guard must fail the test anyway
        pass


@pytest.mark.build
def test_marked_test_sees_the_real_entry_points():
    assert c_build.build.__module__ == "septran.runtime.c_build" and c_build.build.__name__ == "build"


def test_unmarked_test_that_builds_nothing_passes():
    assert c_build.build.__name__ == "refuse"
