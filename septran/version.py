"""Versions: ground-floor facts, importable from any layer without importing the package's front door."""
from __future__ import annotations

import functools
import importlib.metadata

__version__ = "0.1.0"


@functools.lru_cache(maxsize=None)
def tilelang_version() -> str:
    """The installed TileLang's version, from its distribution's METADATA file (never by importing TileLang,
    which takes a second). The file is read, not parsed as e-mail: ``importlib.metadata.version`` parses the
    whole long description, 7 ms of a warm process's 50."""
    try:
        text = importlib.metadata.distribution("tilelang").read_text("METADATA") or ""
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
        if not line:  # the headers end at the first blank line
            break
    return importlib.metadata.version("tilelang")
