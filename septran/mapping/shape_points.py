"""``shape_points:``: the point of a search space that calls of some shapes run when no tuning record names one.

A space's first point serves every shape, and no single tile fits both a 4096-row GEMM and a decode step's one
row (a 256 x 256 accumulator cleared and stored for 1 x 16 of it). A mapping may list points by shape bucket;
the first entry whose bounds every named dimension meets is the call's point::

    shape_points:
      - when: {A: [16]}                   # A has at most 16 rows (any number of columns): a decode step
        point: {gemm_host.tunables.BM: 16, gemm_host.tunables.BK: 4096}

``when`` names entry parameters, each with a list of upper bounds by axis (``null``: any size; axes past the
list: any size); ``above`` the same with lower bounds, which the sizes must exceed (``above: {C: [384, 384]}``:
more than 384 rows and columns); ``ranks`` the number of axes (``ranks: {X: 2}``: X is a matrix; one logic may
build tasks of several ranks, whose tiles differ in what they hold); ``numel`` the most elements (``numel: {X:
2097152}``: a tensor that stays in a cache of some size, whatever its shape). An entry may also ask for element types and CPU features, e.g. a bfloat16 GEMM on a CPU with
AMX (``dtypes: {A: bfloat16}``: the program's type of A; ``cpu_flags: [amx_bf16]``: /proc/cpuinfo's flags),
for a CPU maker (``cpu_vendor: GenuineIntel``: /proc/cpuinfo's ``vendor_id``; a library tuned for one maker's cores),
and for at most so many threads (``threads: 1``: the thread count the kernels run on at the call, torch's; a
grid on one thread runs its programs one after another, so larger tiles cost it no parallelism); ``when`` may
then be left out. ``point`` gives values of the space's ``!tune`` dimensions by path (``task_mappings.`` may be
left out); the others keep their first values. A tuning record for the exact shapes still comes first (see
``septran.runtime.points``); a kernel with dynamic dimensions builds one variant per bucket.

An entry with ``continue: true`` does not end the search: a call it holds for goes on to the next entry it meets,
which adds the dimensions the first did not set (an earlier entry's value stands), and so on until an entry without
``continue``. So a condition that changes one dimension for every size class (an Intel CPU's leaf) is written once,
above the size classes, instead of once in each::

      - {cpu_vendor: GenuineIntel, dtypes: {A: float32}, continue: true, point: {gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic: gemm_leaf_mkl}}
      - {when: {C: [320, 320]}, point: {gemm_host.tunables.BM: 64, gemm_host.tunables.BN: 64}}

The call's bucket is then the entries it met, in order (``bucket``), its point their union (``point_of``).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping as TMapping, Optional

from septran.dtypes import DTYPES
from septran.errors import MappingError, SourceLoc
from septran.mapping.shadowed_points import refuse_shadowed
from septran.mapping.yaml_source import Located, LocatedDict

MAX_BOUND = 2**62


@dataclass(frozen=True)
class ShapePoint:
    """One ``shape_points`` entry: upper bounds by parameter and axis, and the point it selects."""

    when: TMapping[str, tuple[Optional[int], ...]]
    point: TMapping[str, object]
    loc: SourceLoc
    dtypes: TMapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # parameter -> the program's element type of it
    cpu_flags: tuple[str, ...] = ()  # features the host CPU must report
    threads: Optional[int] = None  # at most this many threads (torch's count at the call); None: any
    above: TMapping[str, tuple[Optional[int], ...]] = field(default_factory=lambda: MappingProxyType({}))  # lower bounds
    cpu_vendor: Optional[str] = None  # /proc/cpuinfo's vendor_id the host must report (GenuineIntel); None: any
    goes_on: bool = False  # `continue: true`: a call it holds for goes on to the next entry it meets
    ranks: TMapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # parameter -> its number of axes
    numel: TMapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # parameter -> at most so many elements

    def bounds_text(self) -> str:
        """The bounds as one line: ``A<=[1]; C<=[*, 256]`` (then ``C>[384, 384]``, ``A:bfloat16``, ``cpu:amx_bf16``,
        ``vendor:GenuineIntel``, ``threads<=1`` where asked)."""
        parts = [f"{name}<=[{', '.join('*' if b is None else str(b) for b in bounds)}]"
                 for name, bounds in sorted(self.when.items())]
        parts += [f"{name}>[{', '.join('*' if b is None else str(b) for b in bounds)}]"
                  for name, bounds in sorted(self.above.items())]
        parts += [f"{name}:{d}" for name, d in sorted(self.dtypes.items())] + [f"cpu:{f}" for f in self.cpu_flags]
        parts += [f"{name}:rank{r}" for name, r in sorted(self.ranks.items())]
        parts += [f"{name}.numel<={n}" for name, n in sorted(self.numel.items())]
        parts += [] if self.cpu_vendor is None else [f"vendor:{self.cpu_vendor}"]
        parts += [] if self.threads is None else [f"threads<={self.threads}"]
        return "; ".join(parts)

    def matches(self, shapes: TMapping[str, tuple], dtypes: TMapping[str, str], cpu_flags,
                threads: Optional[int] = None, cpu_vendor: Optional[str] = None) -> bool:
        """Whether a call of these shapes and program types, on a CPU with these flags and ``threads`` threads (None:
        a caller that does not say, which an entry with a thread bound never matches) made by ``cpu_vendor`` (None:
        not said, which an entry asking for a maker never matches), falls in this entry."""
        if self.threads is not None and (threads is None or threads > self.threads):
            return False
        if self.cpu_vendor is not None and cpu_vendor != self.cpu_vendor:
            return False
        for name, want in self.dtypes.items():
            if not dtypes:
                return False  # (a caller that names no types asks about shapes only)
            self._check_named(name, dtypes)
            if dtypes[name] != want:
                return False
        return all(f in cpu_flags for f in self.cpu_flags) and self.holds(shapes)

    def bucket_id(self) -> int:
        """Names the bucket in tuning records (a key's scalars are numbers): 48 bits of the bounds' hash, not the
        entry's place in the list, so that an entry inserted before it leaves its records where they were."""
        return int(hashlib.sha256(self.bounds_text().encode()).hexdigest()[:12], 16)

    def _check_named(self, name: str, params: TMapping[str, object]) -> None:
        if name not in params:
            raise MappingError(f"shape_points names {name!r}, which is not a parameter of the entry task",
                               self.loc, hint=f"parameters: {', '.join(params)}")

    def holds(self, shapes: TMapping[str, tuple]) -> bool:
        """Whether every bounded dimension of ``shapes`` (parameter -> sizes) is within its bounds, every
        parameter ``ranks`` names has that many axes, and every one ``numel`` names at most that many elements."""
        for name, rank in self.ranks.items():
            self._check_named(name, shapes)
            if len(shapes[name]) != rank:
                return False
        for name, most in self.numel.items():
            self._check_named(name, shapes)
            if math.prod(shapes[name]) > most:
                return False
        for bounds_by_name, above in ((self.when, False), (self.above, True)):
            for name, bounds in bounds_by_name.items():
                self._check_named(name, shapes)
                shape = shapes[name]
                for axis, bound in enumerate(bounds):
                    if bound is not None and axis < len(shape) and (shape[axis] <= bound if above else shape[axis] > bound):
                        return False
        return True


def parse(val: Optional[Located], space) -> tuple[ShapePoint, ...]:
    """The entries of ``shape_points`` (``space``: the file's search space, whose dimensions the points name)."""
    if val is None:
        return ()
    if space is None:
        raise MappingError("shape_points needs a search space: this mapping has no !tune", val.loc,
                           hint="give the values to choose between as `!tune [...]`, or delete shape_points")
    if not isinstance(val.value, list) or not val.value:
        raise MappingError("shape_points must be a list of {when: ..., point: ...}", val.loc)
    dims = {d.path: d for d in space.dimensions}
    entries = tuple(_entry(item, dims) for item in val.value)
    refuse_shadowed(entries)
    return entries


def _entry(item: Located, dims: dict) -> ShapePoint:
    d = item.value
    keys = set(d) if isinstance(d, LocatedDict) else set()
    if "point" not in keys or not keys & _CONDITIONS or keys - _CONDITIONS - {"point", "continue"}:
        raise MappingError("a shape_points entry has the key `point`, one or more of `when`, `above`, "
                           "`ranks`, `numel`, `dtypes`, `cpu_flags`, `cpu_vendor`, `threads`, and may have `continue`",
                           item.loc,
                           hint="e.g. `- {when: {A: [16]}, point: {gemm_host.tunables.BM: 16}}`")
    point_val = d["point"]
    if not isinstance(point_val.value, LocatedDict):
        raise MappingError("shape_points: `when` and `point` are mappings", item.loc)
    when, above = _bounds(d.get("when"), "when", item), _bounds(d.get("above"), "above", item)
    for name in set(when) & set(above):
        for axis, (hi, lo) in enumerate(zip(when[name], above[name])):
            if hi is not None and lo is not None and lo >= hi:
                raise MappingError(f"shape_points: {name}'s axis {axis} must be above {lo} and at most {hi}: no size is",
                                   d["above"].loc,
                                   hint="an `above` bound must be below the `when` bound of the same axis")
    point = {}
    for key, value in point_val.value.items():
        path = key if key.startswith("task_mappings.") else f"task_mappings.{key}"
        loc = point_val.value.key_locs[key]
        if path not in dims:
            raise MappingError(f"shape_points: {key} is not a !tune dimension of this mapping", loc,
                               hint="dimensions: " + ", ".join(p.removeprefix("task_mappings.") for p in dims))
        if value.value not in dims[path].choices:
            raise MappingError(f"shape_points: {value.value!r} is not a choice of {key} ({list(dims[path].choices)})",
                               value.loc, hint="add it to the !tune's list")
        point[path] = value.value
    return ShapePoint(MappingProxyType(when), MappingProxyType(point), item.loc, _dtypes(d.get("dtypes")),
                      _flags(d.get("cpu_flags")), _threads(d.get("threads")), MappingProxyType(above),
                      _vendor(d.get("cpu_vendor")), _goes_on(d.get("continue")), _ranks(d.get("ranks")),
                      _numel(d.get("numel")))


_CONDITIONS = {"when", "above", "ranks", "numel", "dtypes", "cpu_flags", "cpu_vendor", "threads"}


def _bounds(val: Optional[Located], key: str, item: Located) -> dict:
    """``when``'s upper bounds or ``above``'s lower ones: parameter -> a size or None per axis."""
    if val is None:
        return {}
    if not isinstance(val.value, LocatedDict):
        raise MappingError(f"shape_points: `{key}` and `point` are mappings", item.loc)
    what = "upper" if key == "when" else "lower"
    out = {}
    for name, bounds in val.value.items():
        items = bounds.value if isinstance(bounds.value, list) else None
        if not items:
            raise MappingError(f"shape_points: {key}.{name} must be a list of {what} bounds by axis (null: any)",
                               bounds.loc, hint=f"e.g. `{name}: [16]`: " + ("at most" if key == "when" else "more than")
                               + " 16 along axis 0")
        for b in items:
            v = b.value
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_BOUND):
                raise MappingError(f"shape_points: a bound of {key}.{name} must be a size (an integer from 0) or null, "
                                   f"got {v!r}", b.loc)
        out[name] = tuple(b.value for b in items)
    return out


def _dtypes(val: Optional[Located]) -> TMapping[str, str]:
    if val is None:
        return MappingProxyType({})
    if not isinstance(val.value, LocatedDict) or not val.value:
        raise MappingError("shape_points: `dtypes` maps parameters to element types", val.loc,
                           hint="e.g. `dtypes: {A: bfloat16}`")
    for name, d in val.value.items():
        if d.value not in DTYPES:
            raise MappingError(f"shape_points: dtypes.{name} must be an element type, got {d.value!r}", d.loc,
                               hint=f"types: {', '.join(DTYPES)}")
    return MappingProxyType({name: d.value for name, d in val.value.items()})


def _ranks(val: Optional[Located]) -> TMapping[str, int]:
    return _counts(val, "ranks", "their numbers of axes", "a number of axes (0 to 16)", 16,
                   "e.g. `ranks: {X: 2}`: X is a matrix")


def _numel(val: Optional[Located]) -> TMapping[str, int]:
    return _counts(val, "numel", "their most elements", "a number of elements (an integer from 0)", MAX_BOUND,
                   "e.g. `numel: {X: 2097152}`: X has at most 2097152 elements (8 MB of float32)")


def _counts(val: Optional[Located], key: str, what: str, each: str, most: int, example: str) -> TMapping[str, int]:
    """A condition that maps parameters to integers from 0 to ``most`` (``ranks``, ``numel``)."""
    if val is None:
        return MappingProxyType({})
    if not isinstance(val.value, LocatedDict) or not val.value:
        raise MappingError(f"shape_points: `{key}` maps parameters to {what}", val.loc, hint=example)
    for name, n in val.value.items():
        if isinstance(n.value, bool) or not isinstance(n.value, int) or not 0 <= n.value <= most:
            raise MappingError(f"shape_points: {key}.{name} must be {each}, got {n.value!r}", n.loc)
    return MappingProxyType({name: n.value for name, n in val.value.items()})


def _flags(val: Optional[Located]) -> tuple[str, ...]:
    if val is None:
        return ()
    items = val.value if isinstance(val.value, list) else None
    if not items or not all(isinstance(f.value, str) and f.value.isidentifier() for f in items):
        raise MappingError("shape_points: `cpu_flags` is a list of /proc/cpuinfo flags", val.loc,
                           hint="e.g. `cpu_flags: [amx_tile, amx_bf16]`")
    return tuple(f.value for f in items)


# x86's CPUID vendor strings as /proc/cpuinfo gives them: an entry naming another would never match (a misspelt
# `intel` would leave its calls on the next entry without a word)
VENDORS = ("GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls")


def _vendor(val: Optional[Located]) -> Optional[str]:
    if val is None:
        return None
    if val.value not in VENDORS:
        raise MappingError(f"shape_points: `cpu_vendor` is a /proc/cpuinfo vendor_id, got {val.value!r}", val.loc,
                           hint=f"one of: {', '.join(VENDORS)}")
    return val.value


def _goes_on(val: Optional[Located]) -> bool:
    if val is None:
        return False
    if not isinstance(val.value, bool):
        raise MappingError(f"shape_points: `continue` is true or false, got {val.value!r}", val.loc,
                           hint="`continue: true`: a call this entry holds for goes on to the next entry it meets")
    return val.value


def _threads(val: Optional[Located]) -> Optional[int]:
    if val is None:
        return None
    v = val.value
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**16:
        raise MappingError(f"shape_points: `threads` is the most threads the entry serves (an integer from 1), got {v!r}",
                           val.loc, hint="e.g. `threads: 1`: calls that run on one thread")
    return v


def asks_threads(entries: tuple[ShapePoint, ...]) -> bool:
    """Whether the bucket of a call depends on the thread count it runs on."""
    return any(e.threads is not None for e in entries)


def asks_vendor(entries: tuple[ShapePoint, ...]) -> bool:
    """Whether the bucket of a call depends on who made the CPU."""
    return any(e.cpu_vendor is not None for e in entries)


def bucket(entries: tuple[ShapePoint, ...], shapes: TMapping[str, tuple], dtypes: TMapping[str, str] = MappingProxyType({}),
           cpu_flags=frozenset(), threads: Optional[int] = None, cpu_vendor: Optional[str] = None) -> Optional[tuple[int, ...]]:
    """The indices of the entries a call falls in: the first whose conditions it meets and, while the last one met
    says ``continue``, the next it meets; None: none."""
    met = []
    for k, e in enumerate(entries):
        if e.matches(shapes, dtypes, cpu_flags, threads, cpu_vendor):
            met.append(k)
            if not e.goes_on:
                break
    return tuple(met) or None


def point_of(entries: tuple[ShapePoint, ...], met: tuple[int, ...]) -> dict:
    """The point of a bucket: each dimension from the first of its entries that sets it."""
    point: dict = {}
    for k in met:
        for path, value in entries[k].point.items():
            point.setdefault(path, value)
    return point


def bucket_id(entries: tuple[ShapePoint, ...], met: tuple[int, ...]) -> int:
    """Names a bucket in tuning records: its one entry's ``bucket_id``, or a hash of its entries' bounds."""
    if len(met) == 1:
        return entries[met[0]].bucket_id()
    text = " | ".join(entries[k].bounds_text() for k in met)
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def described(entries: tuple[ShapePoint, ...], met: tuple[int, ...]) -> str:
    """Where a bucket's point comes from, for ``kernel.tuning``: ``shape_points entry 3 (gemm.yaml:40)``, or
    ``shape_points entries 1 and 3 (gemm.yaml:30, gemm.yaml:40)``."""
    numbers = [str(k + 1) for k in met]
    where = ", ".join(f"{entries[k].loc.file}:{entries[k].loc.line}" for k in met)
    if len(met) == 1:
        return f"shape_points entry {numbers[0]}, {where}"
    return f"shape_points entries {', '.join(numbers[:-1])} and {numbers[-1]}, {where}"
