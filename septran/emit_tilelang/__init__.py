"""Emission: tile program -> readable TileLang source."""
from septran.emit_tilelang.emitter import display_path, emit

__all__ = ["emit", "display_path"]
