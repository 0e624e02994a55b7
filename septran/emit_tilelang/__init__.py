"""Emission: tile program -> readable TileLang source."""
from septran.emit_tilelang.emitter import emit

__all__ = ["emit"]
