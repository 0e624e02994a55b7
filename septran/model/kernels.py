"""Compiled SepTran kernels of the model level, cached under the key of what they compute.

A key names the operator and everything that changes the generated program but not its inputs' shapes: the
target, the logic's variant (an epilogue, a mask kind, grouped heads) and the mapping. Shapes and dtypes are
the ``Kernel``'s own variant cache (a mapping's ``dynamic:`` dimensions share one build), so one key serves a
model's every call of that operator.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Callable, Hashable

log = logging.getLogger(__name__)

_CACHE: dict[Hashable, object] = {}
_LOCK = threading.Lock()


def kernel(key: Hashable, make: Callable[[], object]):
    """The kernel cached under ``key``, made (``septran.compile(...)``) on its first use."""
    with _LOCK:
        k = _CACHE.get(key)
        if k is None:
            log.info("model kernel %s: compiling", key)
            k = _CACHE[key] = make()
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
