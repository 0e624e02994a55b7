"""Which point of a mapping's search space a kernel runs, for each call's shapes.

A mapping without ``!tune`` is its own point. For a search space: the best
point the tuning database holds for exactly these shapes, dtypes, scalars,
device and versions; else, when the kernel was compiled with
``autotune=True`` (or ``SEPTRAN_AUTOTUNE=1``), a search now; else the space's
first point, the hand-written mapping, with one warning per kernel.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from septran.mapping.schema import Mapping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    mapping: Mapping  # the point, as an ordinary mapping
    point: dict  # each !tune key's value by its path ({} for a mapping without !tune)
    source: str  # where the point comes from, for kernel.tuning
    checked: bool = False  # the kernel's compile checked this mapping already (its own, or its space's first point)


def choose(kernel, spec, described: dict) -> Choice:
    mapping = kernel.mapping
    if mapping.space is None:
        return Choice(mapping, {}, "the mapping has no !tune", checked=True)
    from septran import env

    if _device_present(kernel.target):
        from septran.tuning.api import tuning_key
        from septran.tuning.db import default_db

        record = default_db().best(tuning_key(kernel, spec))
        if record is not None:
            return _choice(mapping, dict(record.point), f"the tuning database ({env.tuning_db()}): "
                                                        f"{record.median_s * 1e3:.4g} ms, recorded {record.created}")
        if kernel.autotune:
            from septran.tuning.api import tune

            result = tune(kernel, described, scalars=dict(spec.scalars))
            return _choice(mapping, result.best, f"tuned now: {result.measured} points measured, "
                                                 f"{result.best_s * 1e3:.4g} ms")
    if not kernel._warned_first_point:
        kernel._warned_first_point = True
        log.warning("%s: a search space of %d points (!tune) with no tuned point for these shapes: running its first "
                    "point; tune with septran.compile(..., autotune=True), SEPTRAN_AUTOTUNE=1 or `septran tune`",
                    mapping.file, mapping.space.size)
    return Choice(mapping, dict(mapping.space.first), "the space's first point (not tuned)", checked=True)


def _choice(mapping: Mapping, point: dict, source: str) -> Choice:
    """Another point of the space: its mapping is checked when the variant lowers it."""
    return Choice(mapping.at(point), point, source, checked=point == mapping.space.first)


def _device_present(target) -> bool:
    """Records are kept per device: only a target whose device is here can use or make them."""
    if target.torch_device != "cuda":
        return True  # the host itself
    import torch

    return torch.cuda.is_available()
