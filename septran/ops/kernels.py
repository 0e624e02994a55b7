"""The library's compiled kernels: an operator's shipped logic and mapping, compiled once per key.

A key names the operator and everything that changes the generated program but not its inputs' shapes: the
target, the logic's variant (an epilogue, a mask kind, grouped heads) and the mapping's edits. Shapes and
dtypes are the ``Kernel``'s own variant cache (the mapping's dynamic dimensions share one build), so one key
serves a model's every call of that operator.

The mappings are the shipped ones (the user's ``SEPTRAN_MAPPING_PATH`` folders first) with the dimensions a
model varies (a sequence length, the rows) made dynamic by ``Mapping.with_dynamic``: the model follows the
shipped tuning spaces, and every target that has the operator's mapping can run it.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import logging
import threading
import types
from pathlib import Path
from typing import Callable, Hashable

from septran import resources
from septran.errors import MappingError
from septran.mapping.schema import Mapping, load_mapping

log = logging.getLogger(__name__)

_CACHE: dict[Hashable, object] = {}
_LOCK = threading.Lock()
# torch.compile(..., mode="max-autotune") with the septran backend: the kernels asked for meanwhile tune the new
# shapes they meet (septran.model.modes)
_AUTOTUNE = contextvars.ContextVar("septran_library_autotune", default=False)


@contextlib.contextmanager
def autotuning(on: bool = True):
    """Within it, the library kernels asked for are handed the tuner: a shape with no tuning record is tuned."""
    token = _AUTOTUNE.set(on)
    try:
        yield
    finally:
        _AUTOTUNE.reset(token)


def logic(op: str) -> types.ModuleType:
    """The module of the library's logic file ``septran/ops/logic/<op>.py``."""
    return importlib.import_module(f"septran.ops.logic.{op}")


def mapping_file(target: str, op: str) -> Path:
    """``<target>/<op>.yaml`` from the mapping folders (the user's first), or a MappingError naming the op."""
    for folder in resources.mapping_folders():
        path = folder / target / f"{op}.yaml"
        if path.is_file():
            return path
    raise MappingError(f"no mapping of operator {op!r} for target {target!r}: the model level cannot run it there",
                       hint=f"write mappings/{target}/{op}.yaml")


@functools.lru_cache(maxsize=None)
def has_mapping(target: str, op: str) -> bool:
    try:
        mapping_file(target, op)
        return True
    except MappingError:
        return False


@functools.lru_cache(maxsize=None)
def mapping(target: str, op: str, dynamic: tuple = (), unbound: tuple = ()) -> Mapping:
    """The shipped mapping of ``op`` on ``target`` with ``dynamic`` ((parameter, (axes...)), ...) made dynamic and
    the leaf tasks ``unbound`` (which the logic's variant never launches) without a binding."""
    m = load_mapping(mapping_file(target, op))
    if dynamic:
        m = m.with_dynamic({p: list(axes) for p, axes in dynamic})
    for leaf in unbound:
        m = m.without_binding(leaf)
    return m


def kernel(key: Hashable, target: str, op: str, make_logic: Callable[[], object], dynamic: tuple = (),
           unbound: tuple = ()):
    """The kernel cached under ``key``: ``make_logic()`` (called on the first use only) compiled with ``op``'s
    mapping on ``target`` (see ``mapping``)."""
    with _LOCK:
        k = _CACHE.get(key)
        if k is None:
            import septran

            log.info("library kernel %s: compiling", key)
            k = _CACHE[key] = septran.compile(make_logic(), mapping(target, op, dynamic, unbound), target=target,
                                              autotune=True if _AUTOTUNE.get() else None)
            # the key names the logic and the mapping (this cache holds one kernel per key): the variants' lowerings
            # are kept under it (septran.runtime.lowered)
            k.lowering_name = repr((key, target, op, dynamic, unbound))
        elif _AUTOTUNE.get() and k.tuner is None:  # compiled before without: its variants made so far keep their points
            import septran

            k.tuner = septran.api._tuner(True)  # the front door's: the kernel library imports no tuner itself
        return k


def target_for(device) -> str:
    """The SepTran target that runs tensors on ``device``: the host's fallback target (``detect: {fallback:
    true}``) for the host's tensors, else SEPTRAN_TARGET or the detected accelerator's."""
    import torch

    from septran import env

    return _target_for(torch.device(device).type, env.target_override())


@functools.lru_cache(maxsize=None)
def _target_for(kind: str, override) -> str:  # every op call asks: the registry is read once per device kind
    from septran.target import available_targets, detect_target, load_target

    for name in available_targets():
        t = load_target(name)
        if t.detect.get("fallback") and t.torch_device == kind:
            return name
    return override or detect_target()


def clear() -> None:
    """Forget every cached kernel (tests)."""
    with _LOCK:
        _CACHE.clear()
