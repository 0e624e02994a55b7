"""Compiled SepTran kernels of the model level, cached under the key of what they compute.

A key names the operator and everything that changes the generated program but not its inputs' shapes: the
target, the logic's variant (an epilogue, a mask kind, grouped heads) and the mapping. Shapes and dtypes are
the ``Kernel``'s own variant cache (a mapping's ``dynamic:`` dimensions share one build), so one key serves a
model's every call of that operator.
"""
from __future__ import annotations

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
    """The SepTran target that runs tensors on ``device``: SEPTRAN_TARGET, else the detected accelerator's."""
    from septran.target import detect_target
    from septran import env

    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return next(t for t in _targets() if _is_host(t))
    return env.target_override() or detect_target()


def _targets():
    from septran.target import available_targets

    return available_targets()


def _is_host(name: str) -> bool:
    from septran.target import load_target

    return load_target(name).torch_device == "cpu"


def clear() -> None:
    """Forget every cached kernel (tests)."""
    with _LOCK:
        _CACHE.clear()
