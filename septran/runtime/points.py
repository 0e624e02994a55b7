"""Which point of a mapping's search space a kernel runs, for each call's shapes.

A mapping without ``!tune`` is its own point. For a search space: the best
point the tuning database (``septran.records``) holds for exactly these
shapes, dtypes, scalars, device and versions; else the shipped database's
(``septran/tuned/<target>.jsonl``, made offline by ``septran tune-model
--ship`` on the same CPU model; ``SEPTRAN_SHIPPED_TUNING=0`` skips it); else, when the kernel was
handed a tuner (``septran.compile(..., autotune=True)`` or
``SEPTRAN_AUTOTUNE=1`` hands it ``septran.tuning``'s), a search now; else the
mapping's point for the call's shape bucket (``shape_points:``); else the
space's first point, the hand-written mapping, with one warning per kernel.

The runtime stands below the tuner: it knows a tuner only as the callable
it was handed (``Tuner``), never by import.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from septran import env, progress
from septran.mapping import shape_points
from septran.mapping.schema import Mapping
from septran.mapping.space import SearchSpace
from septran.records import TuningDB, TuningKey, TuningRecord, best_of, default_db, device, device_identity, shipped
from septran.records.shown import shown
from septran.runtime.dynamic_dims import masked

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tuned:
    """What a tuner hands back: the point it chose and, for ``kernel.tuning``, how it chose it."""

    point: dict
    source: str


# (kernel, described inputs {name: (shape, dtype)}, scalars {name: value}) -> the point to run
Tuner = Callable[..., Tuned]


@dataclass(frozen=True)
class Choice:
    mapping: Mapping  # the point, as an ordinary mapping
    point: dict  # each !tune key's value by its path ({} for a mapping without !tune)
    source: str  # where the point comes from, for kernel.tuning
    checked: bool = False  # the kernel's compile checked this mapping already (its own, or its space's first point)


def choose(kernel, spec, described: dict, tuner: Optional[Tuner], warn_first_point: Callable[[], bool]) -> Choice:
    """The point for one specialisation. ``warn_first_point()`` says (once per kernel) whether to warn that the
    untuned first point runs."""
    mapping = kernel.mapping
    if mapping.space is None:
        return Choice(mapping, {}, "the mapping has no !tune", checked=True)
    if device_present(kernel.target):
        db, ship = default_db(), shipped.shipped_db(kernel.target.name)
        key = None if db.empty() and ship is None else record_key(kernel, spec)
        record = None if db.empty() else best_in_space(db, key, mapping.space)
        if record is not None:
            return _choice(mapping, dict(record.point), f"the tuning database ({shown(env.tuning_db())}): "
                                                        f"{record.median_s * 1e3:.4g} ms, recorded {shown(record.created)}")
        record = None if ship is None else best_in_space(ship, key, mapping.space, threads=current_threads())
        if record is not None:  # after the user's: a point tuned on this machine wins over the shipped one
            return _choice(mapping, dict(record.point), f"the shipped tuning database ({shipped.shipped_name(ship)}): "
                                                        f"{record.median_s * 1e3:.4g} ms on this CPU model, recorded "
                                                        f"{shown(record.created)}")
        if tuner is not None:
            tuned = tuner(kernel, described, dict(spec.scalars))
            return _choice(mapping, dict(tuned.point), tuned.source)
    met = bucket(kernel, spec)
    if met is not None:
        return _choice(mapping, shape_points.point_of(mapping.shape_points, met),
                       f"the mapping's point for these shapes ({shape_points.described(mapping.shape_points, met)})")
    if warn_first_point():
        progress.show()  # shown on stderr with the build lines where progress is on
        log.warning("kernel %s (%s): a search space of %d points (!tune) with no tuned point for these shapes: running "
                    "its first point; tune with septran.compile(..., autotune=True), SEPTRAN_AUTOTUNE=1 or `septran tune`",
                    kernel.graph.entry, mapping.file, mapping.space.size)
    return Choice(mapping, dict(mapping.space.first), "the space's first point (not tuned)", checked=True)


def best_in_space(db: TuningDB, key: TuningKey, space: SearchSpace, threads: Optional[int] = None) -> Optional[TuningRecord]:
    """The best record of ``key`` whose point is a point of ``space``. A record whose point is not (a value the
    space does not list, ``"64"`` for 64, ``true`` for 1, a dimension missing or foreign: written by hand or by
    another program) is skipped with a warning naming the database's file and line, once per process; it must
    not stop every call of the kernel, nor be blamed on the mapping. ``threads``: only records timed at that
    thread count (``features["threads"]``; the shipped database's: the key holds no thread count, and a point
    tuned on one thread ran a Llama block's prefill 5 to 10 % slower on two)."""
    usable = []
    for record in db.records(key):
        if threads is not None and record.features.get("threads") != threads:
            continue
        why = space.refusal(record.point)
        if why is None:
            usable.append(record)
            continue
        where = db.where(record)
        if where not in _WARNED:
            _WARNED.add(where)
            log.warning("%s: skipped a tuning record whose point is not a point of the search space of %s: %s",
                        where, shown(space.file), shown(why))
    return best_of(usable)


_WARNED: set[str] = set()  # records already warned about (file:line), once per process


def current_threads() -> int:
    """The thread count the kernels run on now (torch's, which their OpenMP runtime follows)."""
    import torch

    return torch.get_num_threads()


def bucket(kernel, spec) -> Optional[tuple[int, ...]]:
    """Which ``shape_points`` entries the call falls in (its shapes, its program types, this host's CPU flags, the
    thread count and the CPU's maker where an entry asks; None: none, or no entries). A kernel with dynamic dimensions keeps one variant per bucket: a decode step's one row
    runs the decode point, not the prefill's."""
    entries = kernel.mapping.shape_points if kernel.mapping.space is not None else ()
    if not entries:
        return None
    flags = device.host_flags() if any(e.cpu_flags for e in entries) else frozenset()
    threads = current_threads() if shape_points.asks_threads(entries) else None
    vendor = device.host_vendor() if shape_points.asks_vendor(entries) else None
    return shape_points.bucket(entries, spec.shapes, spec.dtypes, flags, threads, vendor)


BUCKET = "shape_points entry"  # a key's scalar, never a parameter's name (not an identifier)


def record_key(kernel, spec) -> TuningKey:
    """Where a record holds; a dynamic dimension is -1 (any size) whether ``spec`` is a call's or a variant's, and
    a dynamic kernel whose mapping lists ``shape_points`` keeps its records per bucket (named by the entry's bounds)."""
    shapes = masked(spec.shapes, kernel.dynamic)
    scalars = dict(spec.scalars)
    met = bucket(kernel, spec) if kernel.dynamic else None
    if met is not None:  # -1 spans the buckets: a decode step and a prefill each keep records of their own
        scalars[BUCKET] = shape_points.bucket_id(kernel.mapping.shape_points, met)  # (not indices: entries get inserted)
    return TuningKey(logic_hash=logic_hash(kernel.graph), space_hash=kernel.mapping.space.digest(),
                     target=kernel.target.name, device=device_identity(kernel.target.torch_device),
                     dtypes=dict(spec.dtypes), shapes={k: tuple(v) for k, v in shapes.items()},
                     scalars=scalars)


def logic_hash(graph) -> str:
    """The logic file's bytes (every task of the graph comes from it), else the printed task graph."""
    from septran.frontend.printer import format_graph

    files = sorted({t.loc.file for t in graph.tasks.values()})
    digest = hashlib.sha256()
    for f in files:
        try:
            digest.update(Path(f).read_bytes())
        except OSError:
            digest.update(format_graph(graph).encode())
    return digest.hexdigest()


def _choice(mapping: Mapping, point: dict, source: str) -> Choice:
    """Another point of the space: its mapping is checked when the variant lowers it."""
    return Choice(mapping.at(point), point, source, checked=point == mapping.space.first)


def device_present(target) -> bool:
    """Records are kept per device: only a target whose device is here can use or make them."""
    if target.torch_device != "cuda":
        return True  # the host itself
    import torch

    return torch.cuda.is_available()
