"""Paths a user hands SepTran (arguments, environment variables): data, checked before any file is read.

A path may be written into logs, comments and error messages; one with a
control character (a newline, a carriage return, a NUL) could forge lines
there, so it is refused outright, as is a path too long to be one.
"""
from __future__ import annotations

import os
import re
from pathlib import PurePath
from typing import Union

from septran.errors import SepTranError

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x80-\x9f\u2028\u2029]")
MAX_PATH_CHARS = 4096


def path_problem(value) -> str | None:
    """Why ``value`` cannot be a user's path, or None."""
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, bytes):
        return "is bytes; pass a str or a pathlib.Path"
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a path"
    if not value:
        return "is empty"
    if len(value) > MAX_PATH_CHARS:
        return f"is longer than {MAX_PATH_CHARS} characters"
    bad = _CONTROL.search(value)
    if bad:
        return f"contains the control character {bad.group(0)!r} at position {bad.start()}"
    return None


def check_user_path(value: Union[str, os.PathLike], what: str, error: type[SepTranError]) -> str:
    """``value`` as a str when it is an acceptable path; else ``error`` naming ``what``."""
    problem = path_problem(value)
    if problem is not None:
        text = str(value)
        shown = repr(text[:60]) + ("..." if len(text) > 60 else "")
        raise error(f"{what} {shown} {problem}", hint="rename the file or folder; a path may not hold control characters")
    return str(value)
