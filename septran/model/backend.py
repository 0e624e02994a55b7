"""The torch.compile backend ``"septran"``: AOTAutograd captures the ATen graph, ``rewrite`` puts SepTran kernels
in, and the rewritten graph runs.

Only inference graphs (``torch.no_grad()`` / ``inference_mode``) are rewritten: the custom ops have no backward,
so a graph that autograd will differentiate runs with torch as captured.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from septran import progress
from septran.model import modes

log = logging.getLogger(__name__)


def _inference_compiler(reports: Optional[list], dry: bool, settings=None, rows: Optional[list] = None,
                        keep: Optional[Callable] = None) -> Callable:
    """The compiler of AOTAutograd's inference graphs; ``settings``: torch.compile's mode and options, checked
    (``septran.model.modes``; None: the default mode, as ``septran.compile_onnx`` runs). ``rows``: the graph
    comes rewritten already (from the cache, ``septran.model.rewritten``), with its report's rows; ``keep(gm,
    report)``: called with a graph just rewritten, before it is lowered (to cache it)."""
    settings = settings if settings is not None else modes.settings()

    def compile_graph(gm, example_inputs):
        from septran.model import profile

        if rows is not None:
            from septran.model.report import Report

            run, report = gm, Report(rows)
        else:
            run, report = _rewritten(gm, dry, keep)
        report.dump()
        log.info("septran: %s", report.summary())
        progress.note("graph %d rewritten: %s", report.rows[0].graph if report.rows else -1, report.summary())
        if run is gm:
            run = _direct(gm)
            executor = getattr(run, "septran_executor", None)
            if executor is not None:
                report.executors.append(executor)
        if reports is not None:
            reports.append(report)
        if not dry:
            run = profile.wrap(_autotuning(run) if settings.autotune else run, run, report.rows[0].graph
                               if report.rows else -1, settings.profile)
        return _boxed(run)

    return compile_graph


def _rewritten(gm, dry: bool, keep: Optional[Callable]):
    """(what runs: ``gm`` rewritten in place, or a copy of it as captured when explaining only or when the rewrite
    fails; the report)."""
    from septran.model.rewrite import rewrite, unrewritten

    captured = _copy(gm)  # what runs when explaining only, or when the rewrite fails
    run = captured if dry else gm
    try:
        report = rewrite(gm)
    except Exception as err:  # noqa: BLE001 - a bug in the rewrite must never break the model
        log.warning("septran: the rewrite failed, the graph runs with torch", exc_info=True)
        return captured, unrewritten(captured, f"the rewrite failed: {type(err).__name__}: {err}")
    if keep is not None and run is gm:
        keep(gm, report)
    return run, report


def _autotuning(run):
    """``run`` with the library kernels it asks for handed the tuner (mode max-autotune)."""
    from septran.ops.kernels import autotuning

    def call(*args):
        with autotuning():
            return run(*args)

    return call


def compile_saved(gm, mode: Optional[str], options: Optional[dict], rows: Optional[list] = None,
                  keep: Optional[Callable] = None):
    """A graph torch's precompile saved (AOTAutograd's inference graph, loaded back) through the inference
    compiler, as ``septran_backend`` compiles one (``septran.model.precompiled``); ``rows`` and ``keep``: as
    ``_inference_compiler``'s (a graph whose rewrite came from the cache, and where to keep a new one)."""
    return _inference_compiler(None, False, modes.settings(mode, options), rows, keep)(_copy(gm), [])


def _direct(gm):
    """The rewritten graph on the direct runner (``septran.model.executor``), or as rewritten if lowering fails or
    SEPTRAN_DIRECT=0."""
    from septran import env
    from septran.model.executor import lower

    if not env.direct_runner():
        return gm
    kept = _copy(gm)
    try:
        executor = lower(gm)
    except Exception:  # noqa: BLE001 - the direct runner must never break the model: the custom ops still run it
        log.warning("septran: the direct runner failed; the graph calls its kernels through torch's custom ops",
                    exc_info=True)
        return kept
    gm.septran_executor = executor
    return gm


def _copy(gm):
    import torch.fx as fx

    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


_warned_gradients = False


def _training_compiler(gm, example_inputs):
    # A warning, once per process: a model called for inference without torch.no_grad() lands here and runs at
    # torch's speed with nothing else on the screen (its parameters require grad, so the graph has a backward).
    global _warned_gradients
    if not _warned_gradients:
        _warned_gradients = True
        log.warning("septran: a graph that needs gradients runs with torch, not SepTran's kernels (they have no "
                    "backward); for inference, call the compiled model under torch.no_grad() or "
                    "torch.inference_mode()")
    else:
        log.info("septran: a graph that needs gradients runs with torch (SepTran's ops have no backward)")
    return _boxed(gm)


def _boxed(gm):
    """AOTAutograd's calling convention: the arguments as one list, which the graph may free as it goes. (As
    torch's ``make_boxed_func``, written here: importing ``torch._functorch.aot_autograd`` costs a loaded
    precompiled model about a third of its start, networkx and sympy's combinatorics with it.)"""

    def call(args):
        return gm(*args)

    call._boxed_call = True
    return call


def septran_backend(gm, example_inputs, reports: Optional[list] = None, dry: bool = False, mode: Optional[str] = None,
                    options: Optional[dict] = None):
    """``torch.compile(model, backend="septran")``. ``reports``: a list each graph's ``Report`` is appended to;
    ``dry``: rewrite only to report, run the graph with torch. ``mode`` and ``options``: torch.compile's (what
    SepTran does with each: ``septran.model.modes``; an unknown one is refused)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch import config as functorch_config

    settings = modes.settings(mode, options)
    if settings.progress is not None:
        progress.enable(settings.progress)
    inference = _inference_compiler(reports, dry, settings)
    # torch's precompile bundles AOTAutograd's result to save it: then a result it can serialize (imported only
    # then: septran.model.precompiled imports torch._inductor's OutputCode)
    if not dry and functorch_config.bundled_autograd_cache:
        from septran.model import precompiled

        inference = precompiled.serializable(lambda keep: _inference_compiler(reports, dry, settings, keep=keep),
                                             _copy, compile_saved, mode, options)
    # keep_inference_input_mutations: a KV cache's write stays in the graph (a copy_ into the input), where the
    # direct runner turns it into one in-place copy (septran.model.inplace); else AOTAutograd copies it all back
    backend = aot_autograd(fw_compiler=_training_compiler, inference_compiler=inference,
                           keep_inference_input_mutations=True)
    return backend(gm, example_inputs)


def register() -> None:
    """Registers ``"septran"`` with torch.compile, unless torch loads it through the entry point right now
    (``torch_dynamo_backends`` in pyproject.toml), which registers it itself."""
    from torch._dynamo.backends import registry

    if "septran" in registry._COMPILER_FNS or registry._BACKENDS.get("septran") is not None:
        return
    registry.register_backend(septran_backend, "septran")
