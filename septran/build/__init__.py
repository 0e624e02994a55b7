"""Building a lowered program: the target's builder, its ordered stages, each output cached under one key.

Layers: this package sits below the runtime and above the emitter; it imports
TileLang only inside ``tilelang_api`` (and ``tl_cache``), and only when a
stage's output is not cached. ``registry`` maps a target's ``tilelang.builder``
fact to a builder (``c_builder``, ``tilelang_builder``), ``key`` computes the
key before any stage runs, ``store`` keeps the outputs bound to it, ``job``
runs the stages of one program, ``parallel`` builds several at once.
"""
from septran.build.job import Job
from septran.build.parallel import build_many
from septran.build.registry import builder_for

__all__ = ["Job", "build_many", "builder_for"]
