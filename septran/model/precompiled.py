"""A graph SepTran compiled that torch's precompile can save and load: no Dynamo, no AOTAutograd in a warm process.

``torch.compile(model, backend="septran", fullgraph=True)`` traces the model with Dynamo and AOTAutograd in every
process, which on a 2-core machine is most of a warm compile (a Llama block: 1.6 s of Dynamo and 1.4 s of
AOTAutograd for a prefill and a decode graph; SepTran's rewrite and loading its cached kernels 0.5 s). torch's
precompile (``torch._dynamo.config.enable_aot_compile``; ``OptimizedModule._aot_compile`` and
``_save_aot_compiled_module`` / ``_load_aot_compiled_module``) keeps Dynamo's guards and AOTAutograd's wrappers on
disk and asks the backend for a graph it can serialize. This is SepTran's: ``SeptranOutputCode`` holds

- the graph AOTAutograd handed SepTran, before the rewrite: ATen only, serialized with torch's ``GraphPickler``
  (the graph's tensors are its inputs: the model's weights are read from the model at run time, never saved);
- torch.compile's mode and options.

On load it rewrites that graph again with this process's SepTran (so a file saved by an older SepTran never runs
its rewrite decisions), or reads the rewrite this SepTran made of the same bytes before from the build cache
(``septran.model.rewritten``), and loads the kernels from the build cache. What is saved is torch's data;
SepTran saves no code. ``septran_backend`` returns it only under precompile (torch's bundled AOTAutograd cache), never for a plain
``torch.compile``, whose AOTAutograd cache key does not name the backend.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional, Sequence

from torch._inductor.output_code import OutputCode

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SeptranOutputCode(OutputCode):
    """AOTAutograd's inference graph, compiled by SepTran now and again after each load (boxed calls)."""

    graph_module: Any = None  # AOTAutograd's graph before the rewrite (None once serialized)
    mode: Optional[str] = None
    options: Optional[dict] = None
    # compiles the loaded graph: backend.compile_saved (pickled by name, so this module imports no backend)
    compile: Optional[Callable] = None
    serialized: Optional[bytes] = None
    run: Optional[Callable] = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._boxed_call = True

    def __call__(self, inputs: Sequence[Any]) -> Any:
        return self.run(inputs)

    def prepare_for_serialization(self) -> None:
        """Called on a copy before it is pickled: the graph as bytes, nothing compiled kept."""
        from torch.fx._graph_pickler import GraphPickler, Options

        if self.serialized is None:  # (made when compiled, or read from the file this was loaded from)
            self.serialized = GraphPickler.dumps(self.graph_module, Options(ops_filter=None))
        self.graph_module, self.run = None, None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """After a load: the graph rewritten and lowered. Its rewrite comes from the build cache where it holds one
        for these bytes (``septran.model.rewritten``), else the graph is read back (its fake values in the tracing
        context's mode) and rewritten, and the rewrite kept for the next load."""
        if self.run is not None:
            return
        import torch

        from septran.model import rewritten

        context = torch._guards.TracingContext.try_get()
        fake_mode = context.fake_mode if context is not None else None
        if fake_mode is None:
            from torch._subclasses import FakeTensorMode
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            fake_mode = FakeTensorMode(shape_env=ShapeEnv())
        key = rewritten.key(self.serialized, self.mode, self.options)
        found = rewritten.read(key, fake_mode)
        if found is not None:
            gm, rows = found
            self.run = self.compile(gm, self.mode, self.options, rows=rows)
            return
        from torch.fx._graph_pickler import GraphPickler

        gm = GraphPickler.loads(self.serialized, fake_mode)
        gm.recompile()
        self.graph_module = gm
        self.run = self.compile(gm, self.mode, self.options,
                                keep=lambda done, report: rewritten.write(key, done, report))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass


def serializable(make_compiler: Callable, copy: Callable, compile_saved: Callable, mode: Optional[str],
                 options: Optional[dict]):
    """SepTran's inference compiler as a compiler whose result torch can serialize. ``make_compiler(keep)``: the
    inference compiler, which calls ``keep(gm, report)`` with each graph just rewritten; ``copy`` copies a graph
    module, ``compile_saved(gm, mode, options)`` compiles a loaded one (``septran.model.backend``'s, module-level
    functions: pickled by name). The graph's bytes are made here, once, so the rewrite this process makes is
    kept under the key a loading process computes from the file (its first load reads it too)."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch.fx._graph_pickler import GraphPickler, Options

    from septran.model import rewritten

    options = dict(options) if options else None

    def compile_and_keep(gm, example_inputs):
        before = copy(gm)  # the rewrite edits gm in place
        serialized = GraphPickler.dumps(before, Options(ops_filter=None))
        key = rewritten.key(serialized, mode, options)
        run = make_compiler(lambda done, report: rewritten.write(key, done, report))(gm, example_inputs)
        return SeptranOutputCode(graph_module=before, mode=mode, options=options, compile=compile_saved,
                                 serialized=serialized, run=run)

    return SerializableAOTDispatchCompiler(SeptranOutputCode, compile_and_keep)
