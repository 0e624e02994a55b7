"""Who wants to hear of each specialisation a kernel makes: ``septran tune-model`` lists the kernels and shapes
a model's step calls, to tune each of them offline.

The runtime stands below the tuner and the model level: it knows an observer only as a callable handed in,
called as ``observer(kernel, spec, described)`` whenever a call's plan is made (once per call signature, never
on the hot path).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

Observer = Callable[..., None]  # (kernel, spec: Specialization, described: {name: (shape, dtype)})
_OBSERVERS: list[Observer] = []


@contextmanager
def specialisations(observer: Observer) -> Iterator[None]:
    """Calls ``observer`` for each specialisation made while the context is open."""
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


def notify(kernel, spec, described: dict) -> None:
    for observer in tuple(_OBSERVERS):
        observer(kernel, spec, described)
