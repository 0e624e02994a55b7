"""Emission: tile program -> readable TileLang source."""
from septran.emit_tilelang.emitter import comment_text, emit

__all__ = ["emit", "comment_text"]
