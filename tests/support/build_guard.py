"""The quick tier's promise, kept by a guard: a test that is not marked as building builds nothing.

``make quick`` runs the tests no marker in ``QUICK_EXCLUDES`` selects out. conftest's hooks patch every entry
point in ``ENTRY_POINTS`` from such a test's setup (its module's fixtures included, where it is the first to ask
for them) to its teardown: a call records itself and raises, and the test fails even where the code under test
swallowed the error (the model backend falls back to torch on any exception). A test that builds says so with
``@pytest.mark.build`` (or a module's ``pytestmark``).

``ENTRY_POINTS`` is the one list of what counts as a build: re-point it here when the build moves.

To find the tests to mark after a change, sweep with ``SEPTRAN_TEST_GUARD_LOG=<file>`` (each unmarked test that
builds is appended to it) and, to let those tests run their builds instead of failing, ``SEPTRAN_TEST_GUARD=record``.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest

# (module, attribute path): every way SepTran (or a test) asks for a binary or device source, or hands a kernel
# to TileLang or a compiler. A cache hit counts as a build too: on a fresh clone's empty cache it is one.
ENTRY_POINTS = (
    ("septran.build.job", "Job.binary"),  # a variant's binary: the last stage of its builder, cached or built
    ("septran.build.job", "Job.device_source"),  # a variant's CUDA/HIP/C: TileLang's lowering, cached or made
    ("septran.build.shared_lib", "built"),  # any .so: a kernel's C, a vendor library
    ("septran.build.tilelang_api", "compile_kernel"),  # tilelang.compile (tuning and benches call it directly)
    ("septran.build.tilelang_api", "lower_device_source"),  # TileLang's lowering to CUDA/HIP/C, no binary
)
# Patched only where the test process has imported them already (importing TileLang costs a second):
# tests/support/cuda_tools.py lowers through TileLang directly.
ENTRY_POINTS_IF_LOADED = (
    ("tilelang", "lower"),
    ("tilelang", "compile"),
)

# Markers that take a test out of the quick tier (the Makefile's ``make quick`` selects on the same names).
QUICK_EXCLUDES = ("build", "slow", "gpu", "nvcc")


def in_quick_tier(item) -> bool:
    return not any(item.get_closest_marker(name) for name in QUICK_EXCLUDES)


class Guard:
    """The entry points patched to refuse, from ``__init__`` to ``undo``; ``calls`` says which were called."""

    def __init__(self, nodeid: str):
        self.nodeid, self.calls, self.reported = nodeid, [], False
        self._patch = pytest.MonkeyPatch()
        for module, path in ENTRY_POINTS:
            *owners, name = path.split(".")
            owner = importlib.import_module(module)
            for attr in owners:  # a method: patched on its class
                owner = getattr(owner, attr)
            self._patch.setattr(owner, name, self._refusing(f"{module}.{path}", getattr(owner, name)))
        for module, name in ENTRY_POINTS_IF_LOADED:
            if module in sys.modules and hasattr(sys.modules[module], name):
                owner = sys.modules[module]
                self._patch.setattr(owner, name, self._refusing(f"{module}.{name}", getattr(owner, name)))

    def message(self) -> str:
        return (f"{self.nodeid} started a build ({self.calls[0]}) but is not marked: add @pytest.mark.build "
                f"(tests/support/build_guard.py)")

    def _refusing(self, what: str, real):
        record_only = os.environ.get("SEPTRAN_TEST_GUARD") == "record"

        def refuse(*args, **kwargs):
            self.calls.append(what)
            if len(self.calls) == 1 and os.environ.get("SEPTRAN_TEST_GUARD_LOG"):  # a sweep's list of tests to mark
                with open(os.environ["SEPTRAN_TEST_GUARD_LOG"], "a") as f:
                    f.write(f"{self.nodeid}\t{what}\n")
            if record_only:
                return real(*args, **kwargs)
            raise AssertionError(self.message())

        return refuse

    def check(self) -> None:
        """Fails the test phase if anything was built and not yet reported (the error may have been swallowed)."""
        if self.calls and not self.reported and os.environ.get("SEPTRAN_TEST_GUARD") != "record":
            self.reported = True
            pytest.fail(self.message(), pytrace=False)

    def undo(self) -> None:
        self._patch.undo()
