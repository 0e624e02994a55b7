"""The mapping language: YAML keys, validated into frozen objects that keep file:line.

Only what can be checked from the file alone is checked here (keys, types,
names, instance references). Checks against the logic and the target happen
where those meet, in ``septran.lowering.bind``.
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping as TMapping, Optional, Sequence, Union

from septran.errors import MappingError, SourceLoc
from septran.mapping import dtype_keys, edits, shape_points
from septran.mapping.halo import Halo, parse_halo
from septran.mapping.space import SearchSpace, collect
from septran.mapping.yaml_source import Located, LocatedDict, load_located, read_mapping_text
from septran.names import check_name
from septran.paths import check_user_path

TOP_KEYS = ("entrypoint", "task_mappings")
# ``target`` may be left out: the compile's ``target=`` or SEPTRAN_TARGET names it (septran.runtime.select.with_target);
# dynamic / static: entry parameter -> axes that stay symbolic / that stay numbers;
# shape_points: the point calls of some shapes run untuned (mapping/shape_points.py);
# keep_dtypes: types the program takes as they are where the target would convert them (target.yaml holds_as_bits)
# stage_dtypes: on-chip tiles of these types hold a wider one (septran/mapping/dtype_keys.py)
OPTIONAL_TOP_KEYS = ("target", "dynamic", "static", "shape_points", "keep_dtypes", "stage_dtypes")
INSTANCE_KEYS = (
    "task_name", "proc", "mems", "tunables", "calls", "pipeline",
    "leaf_task_bindings", "threads", "copy", "accum_dtype", "schedule", "halo",
    "combine",
)
COMBINES = ("atomic", "two_kernels")  # how programs that share an accumulator add into it (lowering/combine.py)
COPY_OPTIONS = {
    "disable_tma": (bool,),
    "eviction_policy": ("evict_normal", "evict_first", "evict_last"),
    "prefer_instruction": ("tma", "cp_async", "sync"),
    "via": (str,),  # not T.copy's: the transfer goes through a buffer in this memory (an output through SHARED)
}
DEFAULT = "*"  # mems: {"*": REGISTER, Q: SHARED}: every parameter and temp not named lives in REGISTER
ACCUM_DTYPES = ("float32", "float16", "float64")
# Bounds checked here, before any value reaches TileLang: its index type is int32.
MAX_TUNABLE = 2**31 - 2  # a tunable is a positive int below 2^31 - 1
MAX_THREADS = 2**31 - 2  # the target's own limit is checked where the mapping meets the target
MAX_PIPELINE_STAGES = 8  # TileLang's pipeliner: more stages than this never pay and exhaust shared memory


@dataclass(frozen=True)
class InstanceMapping:
    """One entry of ``task_mappings``: how one use of a logic task is mapped."""

    name: str
    loc: SourceLoc
    task_name: Located
    proc: Located
    mems: TMapping[str, Located]
    tunables: TMapping[str, Located]
    calls: TMapping[str, Located]
    pipeline: Optional[Located]
    leaf_task_bindings: TMapping[str, Located]
    threads: Optional[Located]
    copy: TMapping[str, TMapping[str, Located]]
    accum_dtype: Optional[Located]
    key_locs: TMapping[str, SourceLoc]
    schedule: Optional[Located] = None  # how the grid's programs are spread over threads (the target's schedules)
    halo: TMapping[str, Halo] = dataclasses.field(default_factory=dict)  # operand -> extra elements staged around its tile
    combine: Optional[Located] = None  # how programs that add into one output element do it (COMBINES)

    def mem(self, name: str) -> Optional[Located]:
        """Where parameter or temp ``name`` lives: its own ``mems`` entry, else ``"*"``'s, else None."""
        return self.mems.get(name) or self.mems.get(DEFAULT)

    def key_loc(self, key: str) -> SourceLoc:
        return self.key_locs.get(key, self.loc)


@dataclass(frozen=True)
class Mapping:
    """A whole mapping file, or one point of the search space a file with ``!tune`` describes."""

    file: str
    target: Located  # its value is None where the file names no target (the compile supplies one: with_target)
    entrypoint: Located
    instances: TMapping[str, InstanceMapping]
    space: Optional[SearchSpace] = None  # the file's !tune dimensions (None: an ordinary mapping)
    point: TMapping[str, object] = dataclasses.field(default_factory=dict)  # the value of each dimension it takes
    # Entry parameter -> its axes that stay symbolic (one compile serves every size); checked against the
    # logic in septran.lowering.dynamic.
    dynamic: TMapping[str, tuple[Located, ...]] = dataclasses.field(default_factory=dict)
    dynamic_loc: Optional[SourceLoc] = None
    # Entry parameter -> axes that stay numbers of each build even where a caller asks for them dynamic
    # (``with_dynamic``): where a symbolic size costs more than a build per size on this target.
    static: TMapping[str, tuple[Located, ...]] = dataclasses.field(default_factory=dict)
    # The located file this mapping was parsed from (a point's: its !tune values resolved): what typed edits
    # rewrite. Not part of the mapping's value: two mappings that say the same are equal wherever they came from.
    source: Optional[Located] = dataclasses.field(default=None, compare=False, repr=False)
    # The space's points by shape bucket, for calls the tuning database has no record for (a space's only).
    shape_points: tuple[shape_points.ShapePoint, ...] = ()
    # Types the program is handed as they are where the target would convert them (cpu: bfloat16 tensors stay
    # bfloat16 for a matrix unit's leaf instead of float32 copies); checked against the target in lowering/bind.py.
    keep_dtypes: tuple[Located, ...] = ()
    # Types whose on-chip tiles hold a wider one (float16 tiles in float32): (type, wider type) pairs.
    stage_dtypes: tuple[tuple[Located, Located], ...] = ()

    def staged_dtype(self, dtype: str) -> str:
        """The type an on-chip tile of a ``dtype`` tensor holds by ``stage_dtypes`` (``dtype`` where it says none)."""
        return next((wide.value for narrow, wide in self.stage_dtypes if narrow.value == dtype), dtype)

    def instance(self, name: str) -> InstanceMapping:
        return self.instances[name]

    def at(self, point: TMapping[str, object]) -> "Mapping":
        """A point of this mapping's search space as an ordinary mapping (no ``space``; unnamed dimensions keep
        their first value): what the tuner measures and a kernel runs."""
        if self.space is None:
            raise MappingError("this mapping has no !tune dimensions", SourceLoc(self.file, 1))
        return dataclasses.replace(_point(self.space, point), space=None)

    def with_dynamic(self, axes: TMapping[str, Sequence[int]], loc: Optional[SourceLoc] = None) -> "Mapping":
        """This mapping with the entry parameters' ``axes`` (``{"X": [0]}``) dynamic too, as if the file's
        ``dynamic:`` listed them: one build serves every size of them; an axis the file's ``static:`` names stays a
        number. A new frozen mapping; the file's values keep their lines, the added axes are located at ``loc``
        (default: the caller's line)."""
        where = loc or _caller()
        return self._edited(lambda root: edits.add_dynamic(root, axes, where))

    def with_target(self, name: str, loc: Optional[SourceLoc] = None) -> "Mapping":
        """This mapping for target ``name`` (a file that names none: the compile's ``target=`` or SEPTRAN_TARGET),
        as if its ``target:`` said so; located at ``loc`` (default: the caller's line)."""
        where = loc or _caller()
        return self._edited(lambda root: edits.set_target(root, name, where))

    def without_binding(self, leaf: str, instance: Optional[str] = None, loc: Optional[SourceLoc] = None) -> "Mapping":
        """This mapping without the ``leaf_task_bindings`` entry of logic task ``leaf`` (in every instance that
        binds it, or in ``instance``): for a variant of the logic that never launches that leaf. A new frozen
        mapping; a MappingError at ``loc`` (default: the caller's line) where nothing binds ``leaf``."""
        where = loc or _caller()
        return self._edited(lambda root: edits.drop_binding(root, leaf, where, instance))

    def _edited(self, edit) -> "Mapping":
        """The mapping parsed again from ``edit`` of its located file (every check runs again); a search space is
        edited as a whole, and the current point keeps the values of the dimensions still there."""
        if self.space is not None:
            space = collect(edit(self.space.root), self.file)
            paths = {d.path for d in space.dimensions}
            if not paths:  # the edit removed the last !tune: an ordinary mapping
                return _parse_located(space.root, self.file)
            return _point(space, {p: v for p, v in self.point.items() if p in paths})
        return _parse_located(edit(self.source), self.file)


def _caller() -> SourceLoc:
    """The line of Python that called a ``Mapping`` edit (two frames up: the edit method, then its caller)."""
    frame = sys._getframe(2)
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno)


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _check_keys(d: LocatedDict, allowed, what: str) -> None:
    for key in d:
        if key not in allowed:
            raise MappingError(
                f"unknown key {key!r} in {what}",
                d.key_locs[key],
                hint=_did_you_mean(key, allowed) + f"allowed keys: {', '.join(allowed)}",
            )


def _ident(val: Located, what: str) -> str:
    return check_name(val.value, what, val.loc, MappingError)


def _dict(val: Located, what: str) -> LocatedDict:
    if not isinstance(val.value, LocatedDict):
        raise MappingError(f"{what} must be a mapping of keys to values, got {val.value!r}", val.loc)
    return val.value


def _name_table(val: Optional[Located], what: str, values_are_names: bool = True, default_key: bool = False) -> dict[str, Located]:
    """Names to names; with ``default_key``, the key ``"*"`` too: the value for every name not listed."""
    if val is None:
        return {}
    d = _dict(val, what)
    out = {}
    for key, item in d.items():
        if not (default_key and key == DEFAULT):
            _ident(Located(key, d.key_locs[key]), f"a key of {what}")
        if values_are_names:
            _ident(item, f"the value of {what}.{key}")
        out[key] = item
    return out


def _positive_int(val: Located, what: str, minimum: int = 1, maximum: int = MAX_TUNABLE) -> int:
    if isinstance(val.value, bool) or not isinstance(val.value, int) or not minimum <= val.value <= maximum:
        shown = repr(val.value) if len(repr(val.value)) <= 40 else repr(val.value)[:40] + "..."
        raise MappingError(f"{what} must be an integer from {minimum} to {maximum}, got {shown}", val.loc)
    return val.value


def _tunables(val: Optional[Located], inst: str) -> dict[str, Located]:
    out = _name_table(val, f"{inst}.tunables", values_are_names=False)
    for key, item in out.items():
        _positive_int(item, f"tunable {key}", maximum=MAX_TUNABLE)
    return out


def _copy_policy(val: Optional[Located], inst: str) -> dict[str, dict[str, Located]]:
    out = {}
    for param, options in _name_table(val, f"{inst}.copy", values_are_names=False).items():
        opts = _dict(options, f"{inst}.copy.{param}")
        _check_keys(opts, tuple(COPY_OPTIONS), f"{inst}.copy.{param}")
        for key, item in opts.items():
            allowed = COPY_OPTIONS[key]
            ok = isinstance(item.value, allowed[0]) if allowed in ((bool,), (str,)) else item.value in allowed
            if ok and allowed == (str,):
                check_name(item.value, f"{inst}.copy.{param}.{key}", item.loc, MappingError)
            if not ok:
                want = {(bool,): "true or false", (str,): "a memory's name"}.get(allowed) or " or ".join(allowed)
                raise MappingError(f"{inst}.copy.{param}.{key} must be {want}, got {item.value!r}", item.loc)
        out[param] = MappingProxyType(dict(opts.items()))
    return out


def _instance(name: str, key_loc: SourceLoc, val: Located) -> InstanceMapping:
    d = _dict(val, f"task_mappings.{name}")
    _check_keys(d, INSTANCE_KEYS, f"task mapping {name}")
    for required in ("task_name", "proc"):
        if required not in d:
            raise MappingError(f"task mapping {name} has no {required!r}", key_loc, hint=f"add `{required}: ...`")
    _ident(d["task_name"], f"{name}.task_name")
    _ident(d["proc"], f"{name}.proc")
    pipeline = d.get("pipeline")
    if pipeline is not None:
        _positive_int(pipeline, f"{name}.pipeline", minimum=0, maximum=MAX_PIPELINE_STAGES)
    threads = d.get("threads")
    if threads is not None:
        _positive_int(threads, f"{name}.threads", maximum=MAX_THREADS)
    accum = d.get("accum_dtype")
    if accum is not None and (not isinstance(accum.value, str) or accum.value not in ACCUM_DTYPES):
        raise MappingError(f"{name}.accum_dtype must be one of {', '.join(ACCUM_DTYPES)}, got {accum.value!r}", accum.loc)
    schedule = d.get("schedule")
    if schedule is not None and not isinstance(schedule.value, str):
        raise MappingError(f"{name}.schedule must be a name (static, dynamic, ...), got {schedule.value!r}", schedule.loc)
    combine = d.get("combine")
    if combine is not None and combine.value not in COMBINES:
        raise MappingError(f"{name}.combine must be one of {', '.join(COMBINES)}, got {combine.value!r}", combine.loc,
                           hint="or leave it out: then programs that add into one output element run one at a time "
                                "where the target can, and are refused where it cannot")
    return InstanceMapping(
        name=name,
        loc=key_loc,
        task_name=d["task_name"],
        proc=d["proc"],
        mems=MappingProxyType(_name_table(d.get("mems"), f"{name}.mems", default_key=True)),
        tunables=MappingProxyType(_tunables(d.get("tunables"), name)),
        calls=MappingProxyType(_name_table(d.get("calls"), f"{name}.calls")),
        pipeline=pipeline,
        leaf_task_bindings=MappingProxyType(_name_table(d.get("leaf_task_bindings"), f"{name}.leaf_task_bindings")),
        threads=threads,
        copy=MappingProxyType(_copy_policy(d.get("copy"), name)),
        accum_dtype=accum,
        key_locs=MappingProxyType(dict(d.key_locs)),
        schedule=schedule,
        halo=MappingProxyType(parse_halo(_name_table(d.get("halo"), f"{name}.halo", values_are_names=False), name)),
        combine=combine,
    )


def parse_mapping(text: str, file: str) -> Mapping:
    """A mapping; for a file with ``!tune``, the space's first point, with ``.space`` to reach the others."""
    check_user_path(file, "the mapping file's name", MappingError)
    root = load_located(text, file)
    space = collect(root, file)
    if not space.dimensions:
        top = _dict(root, "a mapping file")
        shape_points.parse(top.get("shape_points"), None)  # refused: no !tune to choose between
        return _parse_located(root, file)
    return _point(space, space.first)


def _point(space: SearchSpace, point) -> Mapping:
    full = {**space.first, **point}
    mapping = _parse_located(space.resolved(full), space.file)
    top = _dict(space.root, "a mapping file")
    return dataclasses.replace(mapping, space=space, point=MappingProxyType(full),
                               shape_points=shape_points.parse(top.get("shape_points"), space))


def _parse_located(root: Located, file: str) -> Mapping:
    top = _dict(root, "a mapping file")
    _check_keys(top, TOP_KEYS + OPTIONAL_TOP_KEYS, "the mapping file")
    for required in TOP_KEYS:
        if required not in top:
            raise MappingError(f"the mapping has no {required!r}", SourceLoc(file, 1), hint=f"add `{required}: ...` at the top level")
    target = top["target"] if "target" in top else Located(None, SourceLoc(file, 1))
    if target.value is not None:
        _ident(target, "target")
    entry = _ident(top["entrypoint"], "entrypoint")
    table = _dict(top["task_mappings"], "task_mappings")
    instances = {}
    for name, val in table.items():
        _ident(Located(name, table.key_locs[name]), "a task mapping name")
        instances[name] = _instance(name, table.key_locs[name], val)
    if entry not in instances:
        raise MappingError(
            f"entrypoint {entry!r} is not a task mapping",
            top["entrypoint"].loc,
            hint=_did_you_mean(entry, instances) + f"task mappings: {', '.join(instances)}",
        )
    for inst in instances.values():
        for task, callee in inst.calls.items():
            if callee.value not in instances:
                raise MappingError(
                    f"{inst.name}.calls maps {task} to {callee.value!r}, which is not a task mapping",
                    callee.loc,
                    hint=_did_you_mean(callee.value, instances) + f"task mappings: {', '.join(instances)}",
                )
    reached = _reachable(entry, instances)
    for name, inst in instances.items():
        if name not in reached:
            raise MappingError(
                f"task mapping {name} is never reached from the entrypoint {entry}",
                inst.loc,
                hint="name it in some instance's `calls`, or delete it",
            )
    dynamic, static = _axes(top.get("dynamic"), "dynamic"), _axes(top.get("static"), "static")
    for param, axes in dynamic.items():
        pinned = {a.value for a in static.get(param, ())}
        for axis in axes:
            if axis.value in pinned:
                raise MappingError(f"dynamic.{param} names axis {axis.value}, which static.{param} keeps a number",
                                   axis.loc, hint="name the axis in one of dynamic and static")
    return Mapping(file, target, top["entrypoint"], MappingProxyType(instances), dynamic=dynamic,
                   dynamic_loc=top.key_locs["dynamic"] if "dynamic" in top else None, static=static, source=root,
                   keep_dtypes=dtype_keys.keep_dtypes(top.get("keep_dtypes")),
                   stage_dtypes=dtype_keys.stage_dtypes(top.get("stage_dtypes")))


MAX_RANK = 64  # far above any tensor's rank; the logic's ranks are checked where mapping and logic meet


def _axes(val: Optional[Located], key: str) -> TMapping[str, tuple[Located, ...]]:
    """``dynamic: {Q: [2], K: [2]}`` (or ``static:``): entry parameter names -> lists of distinct axes (integers >= 0)."""
    out = {}
    for param, axes in _name_table(val, key, values_are_names=False).items():
        items = axes.value if isinstance(axes.value, list) else None
        if not items:
            raise MappingError(f"{key}.{param} must be a list of axes of {param} (integers from 0), got {axes.value!r}",
                               axes.loc, hint=f"e.g. `{key}: {{{param}: [0]}}`")
        seen = set()
        for item in items:
            _positive_int(item, f"an axis of {key}.{param}", minimum=0, maximum=MAX_RANK - 1)
            if item.value in seen:
                raise MappingError(f"{key}.{param} names axis {item.value} twice", item.loc)
            seen.add(item.value)
        out[param] = tuple(items)
    return MappingProxyType(out)


def _reachable(entry: str, instances: dict[str, InstanceMapping]) -> list[str]:
    seen = [entry]
    for name in seen:
        for callee in instances[name].calls.values():
            if callee.value not in seen:
                seen.append(callee.value)
    return seen


def load_mapping(path: Union[str, Path]) -> Mapping:
    check_user_path(path, "the mapping file's path", MappingError)
    path = Path(path)
    return parse_mapping(read_mapping_text(path), str(path))
