"""Search spaces: a mapping with ``!tune`` values, and its points, each an ordinary mapping.

``!tune`` may stand wherever an instance holds a scalar: a tunable, ``pipeline``,
``threads``, ``accum_dtype``, ``schedule``, a ``mems`` or ``leaf_task_bindings`` value, a copy
option. Spellings::

    BM: !tune [64, 128, 256]                                  # the short form
    BM: !tune {type: choice, values: [64, 128, 256]}
    BK: !tune {type: range, min: 16, max: 64, step: 16}       # 16, 32, 48, 64
    BN: !tune {type: pow2, min: 16, max: 256}                 # 16, 32, ..., 256

A point picks one value per dimension; the mapping of a point is the file with
each ``!tune`` replaced by its value, located at the ``!tune``'s line, so that a
point's mistake is reported there. The first point takes every dimension's
first value: the hand-picked mapping the space grew from.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Iterator, Mapping as TMapping, Optional

from septran.errors import MappingError, SourceLoc
from septran.mapping.yaml_source import Located, LocatedDict, Tune

# Where !tune may stand, by path below task_mappings.<instance>: a key, or a table whose values may be tuned.
TUNABLE_KEYS = ("pipeline", "threads", "accum_dtype", "schedule")
TUNABLE_TABLES = ("tunables", "mems", "leaf_task_bindings")
MAX_POINTS = 1_000_000  # a space larger than this is a typo (a range with a step of 1)


@dataclass(frozen=True)
class Dimension:
    """One ``!tune``: where it stands in the mapping, what it may be, and its line."""

    path: str  # task_mappings.gemm_host.tunables.BM
    choices: tuple
    loc: SourceLoc

    def holds(self, value: object) -> bool:
        """``value`` is one of the choices, of the same type: ``true`` is not 1, ``"64"`` is not 64."""
        return any(type(value) is type(c) and value == c for c in self.choices)


@dataclass(frozen=True, eq=False)
class SearchSpace:
    file: str
    root: Located  # the located file, !tune values in place
    dimensions: tuple[Dimension, ...]

    @property
    def size(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= len(d.choices)
        return n

    @property
    def first(self) -> dict:
        return {d.path: d.choices[0] for d in self.dimensions}

    def points(self) -> Iterator[dict]:
        """Every point, the first one first, in the order of the file's dimensions."""
        for values in itertools.product(*(d.choices for d in self.dimensions)):
            yield {d.path: v for d, v in zip(self.dimensions, values)}

    def digest(self) -> str:
        """Names the space: its dimensions and their choices (not the file's other text, which the logic hash and
        the points' mappings cover)."""
        body = [[d.path, list(d.choices)] for d in self.dimensions]
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def resolved(self, point: TMapping[str, object]) -> Located:
        """The located file with each !tune replaced by the point's value (located at the !tune)."""
        unknown = set(point) - {d.path for d in self.dimensions}
        if unknown:
            raise MappingError(f"not a dimension of this space: {', '.join(sorted(unknown))}", SourceLoc(self.file, 1))
        for d in self.dimensions:
            if d.path in point and not d.holds(point[d.path]):
                raise MappingError(f"{_short(point[d.path])} is not a choice of {d.path} ({list(d.choices)})", d.loc)
        return _replace(self.root, "", {**self.first, **point})

    def refusal(self, point: TMapping[str, object]) -> Optional[str]:
        """Why ``point`` (read from a tuning database, say) is not a whole point of this space; None when it is."""
        paths = [d.path for d in self.dimensions]
        if not isinstance(point, TMapping) or set(point) != set(paths):
            names = sorted(str(k) for k in point) if isinstance(point, TMapping) else []
            return f"it names {', '.join(_short(n) for n in names) or 'nothing'}, not this space's dimensions ({', '.join(paths)})"
        for d in self.dimensions:
            if not d.holds(point[d.path]):
                return f"{d.path} is {_short(point[d.path])}, not one of its choices {list(d.choices)}"
        return None


def collect(root: Located, file: str) -> SearchSpace:
    """The ``!tune`` dimensions of a located mapping file, refusing ``!tune`` where no scalar may be tuned."""
    dims: list[Dimension] = []
    _walk(root, "", dims)
    space = SearchSpace(file, root, tuple(dims))
    if space.size > MAX_POINTS:
        raise MappingError(f"the search space has {space.size} points, more than {MAX_POINTS}",
                           dims[0].loc, hint="use fewer values per !tune, or a larger step")
    return space


def _short(value: object) -> str:
    """A value for a message: its repr (which escapes control characters), cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _walk(val: Located, path: str, out: list) -> None:
    if isinstance(val.value, Tune):
        if not _may_tune(path):
            raise MappingError(f"!tune cannot stand at {path or 'the top level'}: only an instance's scalars are tuned",
                               val.loc, hint="tune tunables, pipeline, threads, accum_dtype, schedule, mems, leaf_task_bindings "
                                             "or copy options")
        out.append(Dimension(path, val.value.choices, val.loc))
    elif isinstance(val.value, LocatedDict):
        for key, item in val.value.items():
            _walk(item, f"{path}.{key}" if path else key, out)
    elif isinstance(val.value, list):
        for k, item in enumerate(val.value):
            _walk(item, f"{path}[{k}]", out)


def _may_tune(path: str) -> bool:
    parts = path.split(".")
    if len(parts) < 3 or parts[0] != "task_mappings":
        return False
    rest = parts[2:]
    if len(rest) == 1:
        return rest[0] in TUNABLE_KEYS
    if len(rest) == 2:
        return rest[0] in TUNABLE_TABLES
    return len(rest) == 3 and rest[0] == "copy"


def _replace(val: Located, path: str, point: TMapping[str, object]) -> Located:
    if isinstance(val.value, Tune):
        return Located(point[path], val.loc)
    if isinstance(val.value, LocatedDict):
        d = val.value
        items = {k: _replace(v, f"{path}.{k}" if path else k, point) for k, v in d.items()}
        return Located(LocatedDict(items, dict(d.key_locs), d.loc), val.loc)
    if isinstance(val.value, list):
        return Located([_replace(v, f"{path}[{k}]", point) for k, v in enumerate(val.value)], val.loc)
    return val
