"""One program's build: its key, computed before any stage runs, and each stage's output, cached or made.

A Job is created when a variant is first built or shown, not when it is
lowered; creating it stores the first two stages' outputs (SepTran's own
text, rewritten with a warning if the cache holds something else). Asking for
a stage's output reads the cache, or makes it from the stage before (which may
in turn be read or made); the binary stage is the builder's ``load``.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from septran import progress
from septran.build import tilelang_api
from septran.build.key import build_key
from septran.build.registry import builder_for
from septran.build.store import Entries
from septran.lowering.tile_ir import TileProgram
from septran.target import Target


class Job:
    def __init__(self, program: TileProgram, tilelang_source: str, tile_text: str, target: Target):
        self.program = program
        self.target = target
        self.builder = builder_for(target)
        self.key = build_key(tilelang_source, self.builder.name, target, self.builder.runs_compiler)
        self.entries = Entries(self.builder.name, program.name, self.key)
        self._texts: dict[str, str] = {"tile": tile_text, "tilelang": tilelang_source}
        self._lock = threading.RLock()
        self._binary: Any = None
        self._prim_func = None
        for name in ("tile", "tilelang"):  # SepTran's own stages: always on disk, as TileLang reads its source there
            stage = self.builder.stage(name)
            found = self.entries.read(stage.ext, stage.what)
            if found is None or found[0].decode(errors="replace") != self._texts[name]:
                self.entries.write(stage.ext, self._texts[name].encode())

    def path(self, stage: str) -> Path:
        s = self.builder.stage(stage)
        return self.entries.path(self.builder.ext(s, self.target))

    def text(self, name: str) -> str:
        """A text stage's output: in memory, else cached, else made from the stage before (and cached)."""
        with self._lock:
            if name not in self._texts:
                stage = self.builder.stage(name)
                ext = self.builder.ext(stage, self.target)
                found = self.entries.read(ext, stage.what)
                if found is None:
                    before = self.builder.before(name)
                    text = stage.make(self, self.text(before.name) if before else None)
                    self.entries.write(ext, text.encode())
                else:
                    text = found[0].decode()
                self._texts[name] = text
            return self._texts[name]

    def cached_text(self, name: str) -> str | None:
        """A text stage's output if it is in memory or cached (nothing made)."""
        with self._lock:
            if name not in self._texts:
                stage = self.builder.stage(name)
                found = self.entries.read(self.builder.ext(stage, self.target), stage.what)
                if found is None:
                    return None
                self._texts[name] = found[0].decode()
            return self._texts[name]

    def keep(self, name: str, text: str) -> None:
        """Stores a text stage's output that another stage produced on the way (TileLang's compile prints the
        device source it builds), unless the cache holds it already."""
        with self._lock:
            if self.cached_text(name) is None:
                stage = self.builder.stage(name)
                self.entries.write(self.builder.ext(stage, self.target), text.encode())
                self._texts[name] = text

    def device_source(self) -> str:
        """The builder's device source (CUDA, HIP, C): cached, or made (TileLang lowers it, nothing is built)."""
        return self.text(self.builder.device)

    def binary(self):
        """The last stage's output: a callable kernel. Built once per job (thread-safe)."""
        with self._lock:
            if self._binary is None:
                last = self.builder.stages[-1]
                cached = self.entries.path(self.builder.ext(last, self.target)).exists()
                with progress.building(self.program.name, cached):
                    self._binary = last.make(self, None)
            return self._binary

    def prim_func(self):
        """TileLang's prim_func of the source (this imports TileLang)."""
        with self._lock:
            if self._prim_func is None:
                self._prim_func = tilelang_api.load_prim_func(self._texts["tilelang"], self.program.name,
                                                              self.path("tilelang"))
            return self._prim_func
