"""Text from the tuning database as a terminal or a log may print it.

A record may hold any text (a point's value, a host name, a shape's name): printed raw, ``ESC [ ...`` would
drive the terminal and ``\\r`` would overwrite what came before. Everything that prints a database's strings
goes through ``shown``.
"""
from __future__ import annotations

from typing import Any


def shown(value: Any) -> str:
    """``value``'s text with control characters, escape sequences and other unprintable characters escaped."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
