"""``septran.precompile`` and ``septran.load_precompiled``: a compiled model saved once, loaded with no tracing.

A warm ``torch.compile(model, backend="septran")`` still traces the model with Dynamo and AOTAutograd in each
new process (most of its time: ``septran.model.precompiled``). ``precompile`` compiles the model once per example
call through torch's precompile and writes one file; ``load_precompiled`` in another process reads it and runs
the model with no Dynamo trace, no AOTAutograd trace and no TileLang (the kernels come from the build cache,
and so do the saved graphs' rewrites, which ``precompile`` kept there: ``septran.model.rewritten``; where the
cache holds none, as on another machine or after a SepTran change, the saved graph is rewritten again and kept).
Guards saved with each graph pick the graph a call runs and refuse a call none of them accepts, as torch.compile
would recompile.

The file is a pickle made by torch (its Dynamo guards and bytecode, AOTAutograd's wrappers, the ATen graph):
load only files you made. The model's weights are not in it; they are read from ``model`` at each call.
torch's precompile is experimental (``torch._dynamo.config.enable_aot_compile``); the file also holds the
Python, torch and device it was made with, and loading refuses another.
"""
from __future__ import annotations

import inspect
import pickle
from pathlib import Path
from typing import Optional, Sequence, Union

import torch

from septran.errors import CallError


def _examples(examples: Sequence) -> list[tuple[tuple, dict]]:
    out = []
    for e in examples:
        if isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], tuple) and isinstance(e[1], dict):
            out.append(e)  # (args, kwargs)
        else:
            out.append((tuple(e) if isinstance(e, (list, tuple)) else (e,), {}))
    if not out:
        raise CallError("septran.precompile needs at least one example call",
                        hint="e.g. septran.precompile(model, [(x, 0, k, v), (x1, 512, k, v)], 'model.pt2')")
    return out


def precompile(model: torch.nn.Module, examples: Sequence, path: Union[str, Path],
               dynamic: Union[bool, Sequence[bool]] = False, mode: Optional[str] = None,
               options: Optional[dict] = None):
    """Compiles ``model`` for each example call (under ``torch.no_grad()``), runs each once on copies of its
    tensors (its kernels build now) and writes the result to ``path``; returns the compiled model. ``examples``: each a tuple of positional arguments, or ``(args, kwargs)``.
    ``dynamic``: per example (or one for all), whether its sizes and integers become symbolic (a decode step
    whose position and cache length change: ``True``), else the graph serves exactly those sizes. ``mode`` and
    ``options``: torch.compile's (``septran.model.modes``)."""
    from torch._dynamo.aot_compile import ModelInput

    if not isinstance(model, torch.nn.Module):
        raise CallError(f"septran.precompile compiles a torch.nn.Module, got {type(model).__name__}")
    calls = _examples(examples)
    flags = [dynamic] * len(calls) if isinstance(dynamic, bool) else list(dynamic)
    if len(flags) != len(calls):
        raise CallError(f"septran.precompile: {len(flags)} dynamic flags for {len(calls)} examples",
                        hint="give one bool for all examples, or one per example")
    inputs = []
    for (args, kwargs), dyn in zip(calls, flags):
        contexts = [torch.no_grad()]
        if dyn:  # sizes and integers symbolic; a float (an eps) stays a constant, as torch.compile keeps it
            contexts.append(torch._dynamo.config.patch(assume_static_by_default=False, specialize_float=True))
        inputs.append(ModelInput(args, kwargs, contexts))
    compiled = torch.compile(model, backend="septran", fullgraph=True, mode=mode, options=options)
    with torch._dynamo.config.patch(enable_aot_compile=True):
        compiled._aot_compile(inputs)
        data = compiled._save_aot_compiled_module()
        # Each example runs once, on copies of its tensors (no in-place write reaches the caller's): the kernels
        # build now, into the cache the loading process reads, instead of at its first call.
        with torch.no_grad():
            for args, kwargs in calls:
                args, kwargs = torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
                compiled(*args, **kwargs)
    Path(path).write_bytes(data)
    return compiled


def load_precompiled(model: torch.nn.Module, path: Union[str, Path]):
    """``model`` as ``precompile`` saved it to ``path``: a callable (``fn(*args)``, as ``model(*args)``) that runs
    the saved graphs (the first whose guards accept the call). Call it under ``torch.no_grad()`` / ``inference_mode``, as the graphs were made."""
    from torch._dynamo.aot_compile import AOTCompiledFunction, AOTCompiledModel
    from torch._dynamo.utils import get_metrics_context
    from torch._guards import CompileContext, compile_context

    import septran.model  # noqa: F401  (registers the backend and SepTran's ops before the graphs load)

    if not isinstance(model, torch.nn.Module):
        raise CallError(f"septran.load_precompiled loads into a torch.nn.Module, got {type(model).__name__}")
    try:
        results = pickle.loads(Path(path).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError) as err:
        raise CallError(f"septran.load_precompiled: {path} is not a file septran.precompile wrote ({err})") from err
    # The graphs' bytecode reads the globals of the model's forward (its module's names, e.g. `torch`)
    f_globals = inspect.unwrap(type(model).forward).__globals__
    loaded = []
    from torch._dynamo import convert_frame

    with torch._dynamo.config.patch(enable_aot_compile=True):
        for data in results:
            with compile_context(CompileContext(convert_frame.get_compile_id({}))), get_metrics_context():
                loaded.append(AOTCompiledFunction.deserialize(data, f_globals))
    # The saved graphs with the model, as torch.compile's module would hold them (not made here: building one
    # imports Dynamo's debugging backends, and AOTAutograd's partitioner with them, a third of a load's time)
    return AOTCompiledModel(model, loaded)
