"""A builder as data: its name and its ordered stages, each one output kept in the cache as ``<name>_<key>.<ext>``.

As in Triton's ``compiler.py``, each stage makes its output from the one
before; a builder's stage list reads top to bottom. A stage whose output the
cache holds is not run, nor is any stage before it: a warm process loads the
last stage's output directly. The first two stages (the tile program's text
and SepTran's TileLang source) are SepTran's own; only the later ones need
TileLang, and only when their output is not cached.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from septran.build.job import Job
    from septran.target import Target


@dataclass(frozen=True)
class Stage:
    name: str
    ext: str    # the cached file's extension (the device source's depends on the target: see Builder.ext)
    what: str   # for messages: "C source"
    make: Callable[["Job", Any], Any]   # (job, the previous stage's output) -> this stage's output


@dataclass(frozen=True)
class Builder:
    name: str
    stages: tuple[Stage, ...]
    device: str           # the stage whose output ``kernel.device_source`` shows
    runs_compiler: bool   # the builder runs the C++ compiler itself: its version and the CPU are in the key

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def before(self, name: str) -> Optional[Stage]:
        k = [s.name for s in self.stages].index(name)
        return self.stages[k - 1] if k else None

    def ext(self, stage: Stage, target: "Target") -> str:
        return target.device_source_ext if stage.name == self.device and stage.ext == "device" else stage.ext
