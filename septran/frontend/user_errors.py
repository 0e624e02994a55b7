"""Exceptions raised by a user's logic code become FrontendErrors at the user's line.

Tracing runs the user's Python: a NameError, a ZeroDivisionError, a TypeError
from using a symbolic shape as a number, are the user's mistakes. Each is
reported at the innermost frame of the traceback that is in the user's logic
file (else in any file outside SepTran), with its original type and message;
no SepTran-internal file and no traceback text goes into the message.
"""
from __future__ import annotations

import os
import sys
import types
from typing import Optional

from septran.errors import FrontendError, SepTranError, SourceLoc

_SEPTRAN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The kernel library's logic files (septran/ops/logic/) are Task Lang as a user writes it: their lines are the
# user's lines of a trace and of an error, though they ship inside the package.
_LOGIC_DIR = os.path.join(_SEPTRAN_DIR, "ops", "logic") + os.sep
MAX_MESSAGE_CHARS = 500

_HINTS = {
    "NameError": "check the spelling, or define the name before the task uses it",
    "RecursionError": "a task or helper calls itself without end",
    "OverflowError": "a number is too large; tile sizes and extents are int32",
}


def is_internal(file: str) -> bool:
    """Whether ``file`` is SepTran's own code (not a logic file of its kernel library)."""
    path = os.path.abspath(file)
    return path.startswith(_SEPTRAN_DIR) and not path.startswith(_LOGIC_DIR)


def user_line(tb: Optional[types.TracebackType], logic_file: Optional[str]) -> Optional[SourceLoc]:
    """The innermost traceback frame in ``logic_file``; else the innermost one outside SepTran and Python's own."""
    in_logic, outside = None, None
    while tb is not None:
        code = tb.tb_frame.f_code
        file = code.co_filename
        if logic_file is not None and os.path.abspath(file) == os.path.abspath(logic_file):
            in_logic = SourceLoc(file, tb.tb_lineno)
        elif not is_internal(file) and not file.startswith(("<frozen", sys.prefix, sys.base_prefix)):
            outside = SourceLoc(file, tb.tb_lineno)
        tb = tb.tb_next
    return in_logic or outside


def describe(err: BaseException) -> str:
    text = str(err)
    for prefix in (_SEPTRAN_DIR, os.path.dirname(_SEPTRAN_DIR.rstrip(os.sep)) + os.sep):
        text = text.replace(prefix, "")
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def as_frontend_error(err: Exception, logic_file: Optional[str], fallback: Optional[SourceLoc], doing: str) -> SepTranError:
    """``err`` (raised while ``doing``) as a FrontendError at the user's line; a SepTranError is kept as it is."""
    if isinstance(err, SepTranError):
        return err
    if isinstance(err, SyntaxError) and err.filename and not is_internal(err.filename):
        loc = SourceLoc(err.filename, err.lineno or 1, err.offset or 0)
        return FrontendError(f"{doing}: SyntaxError: {err.msg}", loc)
    loc = user_line(err.__traceback__, logic_file) or fallback
    out = FrontendError(f"{doing}: {describe(err)}", loc, hint=_HINTS.get(type(err).__name__))
    out.original = err  # for a debugger; never rendered
    return out


def import_logic_module(spec, path: str) -> types.ModuleType:
    """Runs a logic file as a module; what goes wrong in it is a FrontendError at its line."""
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's code: any exception is the user's mistake
        sys.modules.pop(spec.name, None)
        raise as_frontend_error(err, path, SourceLoc(path, 1), "while loading the logic file") from None
    return module
