"""Every environment variable SepTran reads, in one place (as tilelang/env.py does)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def target_override() -> Optional[str]:
    """SEPTRAN_TARGET: the target to use instead of the detected one (cpu, sm80, sm90, gfx942, ...)."""
    return os.environ.get("SEPTRAN_TARGET") or None


def mapping_override() -> Optional[Path]:
    """SEPTRAN_MAPPING: one mapping file to use for every compile."""
    value = os.environ.get("SEPTRAN_MAPPING")
    return Path(value) if value else None


def mapping_path() -> list[Path]:
    """SEPTRAN_MAPPING_PATH: folders of a user's own mappings, searched before the packaged ones."""
    value = os.environ.get("SEPTRAN_MAPPING_PATH", "")
    return [Path(p) for p in value.split(os.pathsep) if p]


def dump_dir() -> Optional[Path]:
    """SEPTRAN_DUMP_DIR: where every stage's output is written, when set."""
    value = os.environ.get("SEPTRAN_DUMP_DIR")
    return Path(value) if value else None


def cache_dir() -> Path:
    """SEPTRAN_CACHE_DIR: where generated TileLang sources are kept (TileLang parses them from files)."""
    value = os.environ.get("SEPTRAN_CACHE_DIR")
    return Path(value) if value else Path.home() / ".cache" / "septran"
