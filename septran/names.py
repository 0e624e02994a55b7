"""Names a user chooses that end up in the text of a generated program.

Task names, parameter names, tunable names, instance names, memory and leaf
names from a mapping, target names: each is written into the TileLang module
SepTran generates (and then imports), so each must be a plain identifier that
shadows nothing the module relies on. The check is strict: ``\\A...\\Z``
semantics (``re.fullmatch``; ``$`` would accept a trailing newline), no Python
keyword or soft keyword, no builtin, no dunder. ``T`` (the TileLang module's
alias) is refused only for a name the program is written with as it is (a
task's name); the lowering gives every other name (parameters, tunables, temps,
indices) a spelling of its own in the program, distinct from ``T``, so a user's
``T`` is renamed there, never refused.
"""
from __future__ import annotations

import builtins
import keyword
import re
from typing import Optional

from septran.errors import SepTranError, SourceLoc

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_CHARS = 128

# What the generated module itself binds or reads by name: the dialect alias and Python's builtins.
GENERATED_MODULE_NAMES = frozenset({"T"})
RESERVED = frozenset(
    set(keyword.kwlist) | set(getattr(keyword, "softkwlist", ())) | set(dir(builtins)) | GENERATED_MODULE_NAMES
)


def name_problem(name, as_is: bool = False) -> Optional[str]:
    """Why ``name`` cannot stand in a generated program, or None when it can; ``as_is``: the program is written
    with the name itself (a task's), not a spelling the lowering chooses for it."""
    if not isinstance(name, str):
        return f"is not a name (a {type(name).__name__})"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    if not _IDENT.fullmatch(name):
        return "has characters other than letters, digits and _, or starts with a digit"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    if name.startswith("__") and name.endswith("__"):
        return "is a Python special name (__...__)"
    if name in GENERATED_MODULE_NAMES:
        return "is the TileLang module's name in the generated program" if as_is else None
    if name in RESERVED:
        return "is a Python builtin, which the generated program may use"
    return None


def is_safe_name(name) -> bool:
    return name_problem(name) is None


def check_name(name, what: str, loc: Optional[SourceLoc], error: type[SepTranError], as_is: bool = False) -> str:
    """``name`` when it is safe; else ``error`` at ``loc`` saying what to rename."""
    problem = name_problem(name, as_is)
    if problem is None:
        return name
    shown = name if not isinstance(name, str) or len(name) <= 40 else name[:40] + "..."
    hint = "rename it"
    if isinstance(name, str) and _IDENT.fullmatch(name) and len(name) <= MAX_NAME_CHARS:
        hint = f"rename it, e.g. to {name.strip('_') or 'x'}_"
    raise error(f"{what} must be a plain identifier, got {shown!r}: it {problem}", loc, hint=hint)
