"""One specialisation of a kernel: its lowered program, its TileLang source and, once built, its binary."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from septran import env
from septran.errors import internal_errors
from septran.lowering import Specialization, explain, lower
from septran.emit_tilelang import emit
from septran.runtime import build, c_build, notebook, points
from septran.runtime import scalars as scalar_args

if TYPE_CHECKING:
    from septran.runtime.kernel import Kernel

log = logging.getLogger(__name__)


class Variant:
    """One specialisation of a kernel: fixed shapes and dtypes, one TileLang program."""

    def __init__(self, kernel: "Kernel", spec: Specialization, choice: points.Choice):
        from septran.version import __version__

        self.kernel = kernel
        self.spec = spec
        self.choice = choice  # which point of the mapping's search space, and where it came from
        # The lowering names the pass that fails; the emitter is the last stage that may.
        shapes = ", ".join(f"{n}: {tuple(s)}" for n, s in spec.shapes.items())
        with internal_errors("lowering", f"{kernel.graph.entry} for {kernel.target.name} with {shapes}"):
            self.program = lower(kernel.graph, choice.mapping, kernel.target, spec, kernel.shapes,
                                 dump=lambda name, make: self._dump(f"{name}.txt", make), checked=choice.checked)
        with internal_errors("emitter", f"{kernel.graph.entry} for {kernel.target.name} with {shapes}"):
            self.tilelang_source = emit(self.program, __version__)
        self.source_path = build.source_file(self.tilelang_source, self.program.name)
        self._prim_func = None
        self._compiled = None
        self._device_source: Optional[str] = None
        self._dump("06-tileprogram.txt", self.explain())
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
    def prim_func(self):
        if self._prim_func is None:
            self._prim_func = build.load_prim_func(self.tilelang_source, self.program.name)
        return self._prim_func

    def build(self):
        """Compiles the program (nvcc for CUDA, g++ for the CPU) once; returns the callable kernel."""
        if self._compiled is None:
            target = self.kernel.target
            if target.builder == "c":  # the C that device_source shows is the C that is built
                self._compiled = c_build.build(self.program, self.device_source, target)
            else:
                self._compiled = build.compile_kernel(self.prim_func, target, str(self.source_path))
                self._device_source = self._compiled.get_kernel_source()
                self._dump_device()
        return self._compiled

    @property
    def device_source(self) -> str:
        """CUDA, HIP or C source; generated without building when the kernel has not been built."""
        if self._device_source is None:
            source = build.lower_device_source(self.prim_func, self.kernel.target, str(self.source_path))
            self._device_source = c_build.c_source(self.program, source) if self.kernel.target.builder == "c" else source
            self._dump_device()
        return self._device_source

    def _dump_device(self) -> None:
        self._dump(f"device.{self.kernel.target.device_source_ext}", self._device_source)
