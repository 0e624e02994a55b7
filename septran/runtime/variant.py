"""One specialisation of a kernel: its lowered program, its TileLang source and, once built, its binary."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from septran import env
from septran.build import Job
from septran.errors import internal_errors
from septran.lowering import Specialization, explain, lower
from septran.emit_tilelang import emit
from septran.runtime import lowered, notebook, points
from septran.runtime import scalars as scalar_args

if TYPE_CHECKING:
    from septran.runtime.kernel import Kernel

log = logging.getLogger(__name__)


class Variant:
    """One specialisation of a kernel: fixed shapes and dtypes, one TileLang program.

    Lowering and emitting are SepTran's own (no TileLang); the build (``septran.build``: the target's builder,
    its stages cached under a key of the emitted text) starts when the variant is first built or shown, and
    in a process that finds it cached never imports TileLang."""

    def __init__(self, kernel: "Kernel", spec: Specialization, choice: points.Choice):
        from septran.version import __version__

        self.kernel = kernel
        self.spec = spec
        self.choice = choice  # which point of the mapping's search space, and where it came from
        # The lowering names the pass that fails; the emitter is the last stage that may.
        cache_key = lowered.key(kernel, spec, choice)
        kept = None if cache_key is None else lowered.read(cache_key)
        if kept is not None:
            self.program, self.tilelang_source = kept
        else:
            shapes = ", ".join(f"{n}: {tuple(s)}" for n, s in spec.shapes.items())
            with internal_errors("lowering", f"{kernel.graph.entry} for {kernel.target.name} with {shapes}"):
                self.program = lower(kernel.graph, choice.mapping, kernel.target, spec, kernel.shapes,
                                     dump=lambda name, make: self._dump(f"{name}.txt", make), checked=choice.checked)
            with internal_errors("emitter", f"{kernel.graph.entry} for {kernel.target.name} with {shapes}"):
                self.tilelang_source = emit(self.program, __version__)
            if cache_key is not None:
                lowered.write(cache_key, self.program, self.tilelang_source)
        self._job: Optional[Job] = None
        self._lock = threading.Lock()
        self._device_dumped = False
        self._dump("06-tileprogram.txt", self.explain)
        self._dump("tilelang.py", self.tilelang_source)

    def __repr__(self) -> str:
        return f"<septran.Variant {self.tag}, point: {self.choice.source}>"

    def _repr_markdown_(self) -> str:  # Jupyter
        return notebook.variant_markdown(self)

    @property
    def tag(self) -> str:
        entry = self.kernel.graph.entry_task
        name = entry.name.removesuffix("_logic") or entry.name
        shapes = "_".join("x".join(map(str, self.spec.shapes[p.name])) for p in self.kernel.graph.entry_task.params)
        dtypes = [self.spec.dtypes[p.name] for p in self.kernel.graph.entry_task.params]
        dtype = dtypes[0] if len(set(dtypes)) == 1 else "_".join(dtypes)  # per parameter where they differ
        scalars = "".join(f".{k}{scalar_args.text(v)}" for k, v in sorted(self.spec.scalars.items()))
        return f"{name}.{self.kernel.target.name}.{shapes}.{dtype}{scalars}"

    def _dump(self, suffix: str, text) -> None:
        """Writes ``text`` (or what ``text()`` makes) to SEPTRAN_DUMP_DIR, when it is set."""
        folder = env.dump_dir()
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.tag}.{suffix}").write_text(text() if callable(text) else text)

    def explain(self) -> str:
        return explain(self.program)

    @property
    def job(self) -> Job:
        """The build of this variant (its key computed, SepTran's own stages stored); made on first use."""
        with self._lock:
            if self._job is None:
                self._job = Job(self.program, self.tilelang_source, self.explain(), self.kernel.target)
            return self._job

    @property
    def source_path(self) -> Path:
        """The cached TileLang source file (the build's ``tilelang`` stage)."""
        return self.job.path("tilelang")

    @property
    def prim_func(self):
        return self.job.prim_func()

    def build(self):
        """Builds the program once (or loads it from the cache); returns the callable kernel. Thread-safe."""
        compiled = self.job.binary()
        self._dump_device()
        return compiled

    @property
    def device_source(self) -> str:
        """CUDA, HIP or C source; generated without building when the kernel has not been built."""
        text = self.job.device_source()
        self._dump_device()
        return text

    def _dump_device(self) -> None:
        """Once per variant, whether the device source was made here or found in the cache."""
        if not self._device_dumped and env.dump_dir() is not None:
            self._device_dumped = True
            self._dump(f"device.{self.kernel.target.device_source_ext}", self.job.device_source())
