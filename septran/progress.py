"""Saying what a first compile is doing: one line per kernel build, and the warnings that matter while it runs.

A first compile of a model builds its kernels one by one (9 to 33 s for two layers on a small CPU) where
nothing else would show. With progress on, the ``septran`` logger gets one stderr handler that shows
``septran.progress``'s lines (each kernel built, with its time; a model graph rewritten) and every other
SepTran warning, such as a kernel that runs its search space's untuned first point.

On by default in an interactive terminal; off under CI (``CI`` set) and pytest, and when the program has
configured logging itself (its own handlers then decide what shows: the lines are INFO records of the
``septran.progress`` logger). ``SEPTRAN_PROGRESS=1`` or ``0``, or ``enable()``, decide instead.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Optional

from septran import env

log = logging.getLogger("septran.progress")

_LOCK = threading.Lock()
_forced: Optional[bool] = None  # enable()'s choice, over the environment's
_handler: Optional[logging.Handler] = None
_built = 0


class _Shown(logging.Filter):
    """Progress lines at INFO, everything else of SepTran's at WARNING and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.startswith(log.name)


def enabled() -> bool:
    """Whether builds are announced: enable()'s choice, else SEPTRAN_PROGRESS, else an interactive terminal
    outside CI and pytest."""
    if _forced is not None:
        return _forced
    setting = env.progress()
    if setting is not None:
        return setting
    if os.environ.get("CI") or "PYTEST_CURRENT_TEST" in os.environ or "pytest" in sys.modules:
        return False
    stream = sys.stderr
    return bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())


def enable(on: Optional[bool] = True) -> None:
    """Announce builds (True), or not (False), whatever the environment says; None: the environment decides."""
    global _forced
    _forced = on


def _show() -> None:
    """The stderr handler, once, unless the program's logging shows the records itself."""
    global _handler
    log.setLevel(logging.INFO)  # the lines pass whatever level the program's own logging keeps
    with _LOCK:
        if _handler is not None or logging.getLogger().handlers:
            return
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("septran: %(message)s"))
        _handler.addFilter(_Shown())
        root = logging.getLogger("septran")
        root.addHandler(_handler)


def show(always: bool = False) -> None:
    """Where progress is on (or ``always``: what a user asked for, a profile's files), SepTran's warnings from
    now on show on stderr (a kernel's untuned first point)."""
    if always or enabled():
        _show()


def note(message: str, *args) -> None:
    """One progress line (a model graph rewritten, its kernels about to build)."""
    if enabled():
        _show()
        log.info(message, *args)


@contextmanager
def building(name: str, cached: bool):
    """Around one program's build (``cached``: the build cache holds it, so it only loads: no line)."""
    global _built
    if cached or not enabled():
        yield
        return
    _show()
    start = time.perf_counter()
    yield
    with _LOCK:
        _built += 1
        n = _built
    log.info("kernel %d built: %s (%.2f s)", n, name, time.perf_counter() - start)
