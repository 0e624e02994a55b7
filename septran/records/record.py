"""One trial of one point of a search space: what was tried, what happened, every sample.

Kernel Tuner keeps every trial with its status; Triton's cache keeps only
the winner's time. A record keeps the point, its status (and the rule that
pruned it, or the error), all timing samples with how they were taken, the
cost model's features, and when and where it was measured. One record is one
line of the database (``to_json`` / ``from_json``).
"""
from __future__ import annotations

import datetime
import json
import math
import socket
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Optional

from septran.records.key import TuningKey, canonical_json, sha256_text

SCHEMA = 1
STATUSES = ("ok", "pruned", "compile_error", "wrong", "timeout", "error")
TIMING_METHODS = ("wall", "cuda_events", "tilelang_profiler")
MAX_RULE_CHARS = 2000


@dataclass(frozen=True)
class Timing:
    """How samples were taken: the clock, warm-up runs, timed runs, and whether candidates were interleaved."""

    method: str
    warmup: int
    reps: int
    interleaved: bool = False

    def __post_init__(self) -> None:
        if self.method not in TIMING_METHODS:
            raise ValueError(f"Timing.method must be one of {TIMING_METHODS}, not {self.method!r}")
        for name in ("warmup", "reps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Timing.{name} must be a non-negative int, not {value!r}")
        if not isinstance(self.interleaved, bool):
            raise ValueError(f"Timing.interleaved must be a bool, not {self.interleaved!r}")

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "warmup": self.warmup, "reps": self.reps, "interleaved": self.interleaved}


def point_id(point: Mapping[str, Any]) -> str:
    """A point's stable name: the first 16 hex digits of sha256 of its canonical JSON."""
    return sha256_text(canonical_json(dict(point)))[:16]


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class TuningRecord:
    """A trial. Left empty, ``median_s``, ``created`` and ``host`` are filled in; ``point_id`` is always computed.

    ``point``: the chosen value of every ``!tune`` key, by its path in the
    mapping (``{"task_mappings.gemm_host.tunables.BM": 64}``). ``rule``: the
    pruning rule, or the error message (truncated). ``features``: the cost
    model's, opaque here. ``op``: a name for tables (the logic's), not part
    of the key.
    """

    key: TuningKey
    point: Mapping[str, Any]
    status: str
    timings: tuple[float, ...] = ()
    timing: Optional[Timing] = None
    rule: Optional[str] = None
    features: Mapping[str, Any] = field(default_factory=dict)
    median_s: Optional[float] = None
    op: str = ""
    created: str = ""
    host: str = ""
    point_id: str = ""

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        if not isinstance(self.key, TuningKey):
            raise ValueError(f"TuningRecord.key must be a TuningKey, not {type(self.key).__name__}")
        if self.status not in STATUSES:
            raise ValueError(f"TuningRecord.status must be one of {STATUSES}, not {self.status!r}")
        if not isinstance(self.point, Mapping) or not all(isinstance(k, str) for k in self.point):
            raise ValueError("TuningRecord.point must map each !tune key's path (a str) to its value")
        point = json.loads(canonical_json(dict(self.point)))  # a copy; ValueError for NaN, TypeError for objects
        set_("point", MappingProxyType(point))
        set_("point_id", point_id(point))
        timings = tuple(float(t) for t in self.timings)
        if not all(math.isfinite(t) and t >= 0 for t in timings):
            raise ValueError(f"TuningRecord.timings must be finite non-negative seconds, not {list(timings)!r}")
        set_("timings", timings)
        if isinstance(self.timing, Mapping):
            set_("timing", Timing(**self.timing))
        elif self.timing is not None and not isinstance(self.timing, Timing):
            raise ValueError(f"TuningRecord.timing must be a Timing, not {self.timing!r}")
        if self.median_s is None and timings:
            set_("median_s", statistics.median(timings))
        if self.median_s is not None:
            set_("median_s", float(self.median_s))
            if not math.isfinite(self.median_s) or self.median_s < 0:
                raise ValueError(f"TuningRecord.median_s must be finite non-negative seconds, not {self.median_s!r}")
        if self.status == "ok" and self.median_s is None:
            raise ValueError("an ok TuningRecord needs its timings (or median_s)")
        if self.status == "pruned" and not self.rule:
            raise ValueError("a pruned TuningRecord names the rule that pruned it")
        if self.rule is not None:
            rule = str(self.rule)
            set_("rule", rule if len(rule) <= MAX_RULE_CHARS else rule[: MAX_RULE_CHARS - 3] + "...")
        set_("features", MappingProxyType(json.loads(json.dumps(dict(self.features), default=_plain))))
        set_("created", self.created or utc_now())
        set_("host", self.host or socket.gethostname())

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object: schema, the key's fields and digest, then the trial."""
        return {
            "schema": SCHEMA,
            "key": self.key.digest(),
            **self.key.to_json(),
            "op": self.op,
            "point": dict(self.point),
            "point_id": self.point_id,
            "status": self.status,
            "rule": self.rule,
            "timings": list(self.timings),
            "timing": self.timing.to_json() if self.timing else None,
            "median_s": self.median_s,
            "features": dict(self.features),
            "created": self.created,
            "host": self.host,
        }

    def to_line(self) -> bytes:
        """The record as one line of the database, newline included."""
        return (json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=True) + "\n").encode("ascii")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TuningRecord":
        """The record a line holds; ValueError, KeyError or TypeError when it is not one of this schema."""
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, not {SCHEMA}")
        return cls(
            key=TuningKey.from_json(data),
            point=data["point"],
            status=data["status"],
            timings=tuple(data.get("timings") or ()),
            timing=data.get("timing"),
            rule=data.get("rule"),
            features=data.get("features") or {},
            median_s=data.get("median_s"),
            op=str(data.get("op") or ""),
            created=str(data.get("created") or ""),
            host=str(data.get("host") or ""),
        )


def _plain(value: Any) -> Any:
    """numpy scalars and other objects in features: their Python value, else their text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
