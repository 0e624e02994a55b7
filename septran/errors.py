"""Errors a user can act on, and the one kind that is SepTran's own bug.

Every user error names the place to change (``file:line:col``), shows that
line with a caret, and says what to do, in the way Triton's
``CompilationError`` does. ``InternalError`` is kept apart, as Halide keeps
``internal_assert`` apart from ``user_assert``.
"""
from __future__ import annotations

import contextlib
import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A place in a user's file: a logic file or a mapping file."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.col else f"{self.file}:{self.line}"

    def source_line(self) -> str:
        linecache.checkcache(self.file)  # a file edited since it was last shown (a notebook's mapping) is read again
        return linecache.getline(self.file, self.line).rstrip("\n")


class SepTranError(Exception):
    """A mistake in a user's logic, mapping or call, with where and what to change."""

    stage = "error"

    def __init__(self, message: str, loc: SourceLoc | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.loc}: {self.stage} error: {self.message}" if self.loc else f"{self.stage} error: {self.message}"
        parts = [head]
        if self.loc is not None:
            text = self.loc.source_line()
            if text:
                parts.append("    " + text)
                indent = len(text) - len(text.lstrip())
                col = self.loc.col - 1 if self.loc.col else indent
                parts.append("    " + " " * max(col, 0) + "^")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


class FrontendError(SepTranError):
    """The logic (Task Lang) is malformed."""

    stage = "logic"


class MappingError(SepTranError):
    """The mapping file is malformed or does not fit the logic."""

    stage = "mapping"


class LoweringError(SepTranError):
    """The mapping asks for something the target cannot do."""

    stage = "lowering"


class BuildError(SepTranError):
    """TileLang or the native compiler refused the generated program."""

    stage = "build"


class CallError(SepTranError):
    """A kernel was called with tensors that do not fit it."""

    stage = "call"


class DeviceError(SepTranError):
    """A vendor library reported an error while a kernel ran (a DSA's own checks)."""

    stage = "device"


class InternalError(Exception):
    """A bug in SepTran itself: please report it with the message.

    Names the stage that failed and the input that made it fail, so that a
    report can be reproduced; the original exception is its ``__cause__``.
    """

    def __init__(self, stage: str, message: str, inputs: str = ""):
        self.stage, self.message, self.inputs = stage, message, inputs
        text = f"internal error in SepTran's {stage}: {message}"
        if inputs:
            text += f"\n  while compiling: {inputs}"
        text += "\n  this is a bug in SepTran, not in your logic or mapping; please report it with this message"
        super().__init__(text)


@contextlib.contextmanager
def internal_errors(stage: str, inputs: str = ""):
    """Re-raises any exception that is not a ``SepTranError`` as an ``InternalError`` of ``stage``."""
    try:
        yield
    except SepTranError as err:
        if getattr(err, "lowering_pass", None) is None:
            err.lowering_pass = stage  # which pass refused (the tuner counts pruned points by it)
        raise
    except Exception as err:
        raise InternalError(stage, f"{type(err).__name__}: {err}", inputs) from err
