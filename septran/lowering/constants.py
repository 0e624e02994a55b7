"""Pass: resolve constants. Problem sizes and every tunable, named once, up front.

The names become the generated program's constants (``A_dim0 = 200``,
``BM = 64``); every later pass reads values from here. A tunable the logic
uses and the mapping does not set, one that the mapping sets twice with two
values, and one the logic never uses are errors at the mapping's line.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from septran.errors import LoweringError, MappingError
from septran.expr import Dim, Expr, Sym, Tunable, Var, evaluate, leaves
from septran.frontend import elementwise as el
from septran.frontend.bounds import INT32_MAX
from septran.frontend.ir import Launch, Loop, PrimCall, TaskDef, TaskGraph, TileRef
from septran.frontend.shapes import DimClass, ShapeRelations
from septran.lowering import tile_ir as ir
from septran.lowering.dynamic import DynamicValue, dynamic_members
from septran.lowering.intervals import bounds
from septran.lowering.tile_ir import Why
from septran.mapping.schema import InstanceMapping, Mapping as MappingFile
from septran.target import Target

INDEX_LIMIT = INT32_MAX  # TileLang indexes with 32-bit integers


class Names:
    """Names of the generated program: each new one distinct from every name taken (``k``, then ``k_2``)."""

    def __init__(self, used):
        self.used = set(used)

    def new(self, base: str) -> Sym:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return Sym(name)


@dataclass(frozen=True)
class Specialization:
    """What a call fixes: every entry parameter's shape and dtype."""

    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    scalars: Mapping[str, float] = field(default_factory=dict)  # the entry task's scalar parameters


@dataclass(frozen=True)
class Context:
    """What every pass may read: the inputs of the lowering, never changed by it."""

    graph: TaskGraph
    mapping: MappingFile
    target: Target
    spec: Specialization
    shapes: ShapeRelations

    def instance(self, name: str) -> InstanceMapping:
        return self.mapping.instance(name)

    def reachable(self) -> tuple[InstanceMapping, ...]:
        """Every instance reached from the entrypoint through ``calls``, entry first."""
        out, todo = [], [self.mapping.entrypoint.value]
        while todo:
            inst = self.mapping.instance(todo.pop(0))
            if inst not in out:
                out.append(inst)
                todo.extend(c.value for c in inst.calls.values())
        return tuple(out)


@dataclass(frozen=True)
class Constants:
    consts: tuple[ir.Const, ...]
    values: Mapping[Sym, int]
    entry_dims: Mapping[Expr, Expr]  # Dim(entry param, axis) -> Var(its constant)
    tunables: Mapping[str, Expr]  # tunable name -> Var(its constant)
    names: frozenset  # names the program already uses
    # A dynamic dimension's constant -> the sizes it may take (a symbolic variable of the program, no number)
    dynamic: Mapping[Sym, tuple[int, int]] = field(default_factory=dict)
    # Var(constant) -> value: what ``value`` evaluates with (made once; every pass evaluates many extents)
    env: Mapping[Expr, int] = field(init=False, repr=False, compare=False)
    # Sym -> (least, greatest) value: a constant's one number, a dynamic size's range (for intervals.bounds)
    intervals: Mapping[Sym, tuple[int, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType({Var(s): v for s, v in self.values.items()}))
        object.__setattr__(self, "intervals", MappingProxyType({s: (v, v) for s, v in self.values.items()} | dict(self.dynamic)))

    def value(self, e: Expr) -> int:
        try:
            return evaluate(e, self.env)
        except KeyError as err:
            if isinstance(err.args[0], Var) and err.args[0].sym in self.dynamic:
                raise DynamicValue(
                    f"the lowering needs the number {e}, which depends on the dynamic dimension {err.args[0]}",
                    hint="drop that dimension from the mapping's `dynamic` (a compile per size), or map the logic so "
                         "that no tile or buffer extent depends on it") from None
            raise

    def known(self, e: Expr):
        """``e``'s number, or None where it depends on a block index or a dynamic size."""
        try:
            return self.value(e)
        except KeyError:  # DynamicValue is one too
            return None

    def range(self, e: Expr) -> tuple[int, int]:
        """The smallest and largest value of ``e`` over every size of the dynamic dimensions."""
        return bounds(e, self.intervals)


def resolve_constants(ctx: Context) -> Constants:
    names = Names({"T"})  # T: the emitted program's name for TileLang's language module
    consts: list[ir.Const] = []
    entry_dims: dict[Expr, Expr] = {}
    entry = ctx.graph.entry_task

    roles = {p.name: ctx.graph.privilege(entry.name, p.name).role for p in entry.params}
    named = dynamic_members(ctx.mapping)
    dynamic: dict[Sym, tuple[int, int]] = {}
    for cls in _named_once(ctx, named):
        inputs = [m for m in cls.members if roles[m[0]] != "output"] or list(cls.members)
        pname, axis = inputs[0]
        sym = names.new(f"{pname}_dim{axis}")
        tied = ", ".join(f"{p}.shape[{a}]" for p, a in cls.members)
        if named & set(cls.members):  # a tie makes the whole class dynamic
            dynamic[sym] = (1, _dynamic_upper(ctx, cls.members))
            consts.append(ir.Const(sym, None, Why(f"dynamic problem size {tied}", mapping=ctx.mapping.dynamic_loc),
                                   dtype="int64" if ctx.target.index_bits == 64 else "int32"))
        else:
            consts.append(ir.Const(sym, ctx.spec.shapes[pname][axis],
                                   Why(f"problem size {tied}", logic=cls.reasons[0] if cls.reasons else None)))
        for p, a in cls.members:
            entry_dims[Dim(entry.param(p).sym, a)] = Var(sym)

    settings = _tunable_settings(ctx)
    used = _tunables_in_order(ctx.graph)
    tunables: dict[str, Expr] = {}
    for name, (task, use) in used.items():
        if name not in settings:
            # Name the partition that writes the tunable, not a line that only uses its effect (Ap.shape[1]).
            use = next((p.loc for t in ctx.graph.tasks.values() for p in t.partitions if Tunable(name) in p.tile), use)
            inst = next((i for i in ctx.reachable() if i.task_name.value == task.name), ctx.reachable()[-1])
            where = next((i.key_loc("tunables") for i in ctx.reachable() if i.tunables), inst.loc)
            raise LoweringError(
                f"the logic uses tunable {name} (at {use}) but the mapping does not set it",
                where,
                hint=f"add `tunables: {{{name}: <int>}}` to {inst.name} or an instance above it",
            )
        val, inst = settings[name]
        sym = names.new(name)
        tunables[name] = Var(sym)
        consts.append(ir.Const(sym, val.value, Why(f"tunable {name} = {val.value}", mapping=val.loc)))
    for name, (val, inst) in settings.items():
        if name not in used:
            close = difflib.get_close_matches(name, list(used), n=1)
            raise MappingError(
                f"{inst.name}.tunables sets {name}, which the logic never uses",
                val.loc,
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + f"the logic uses: {', '.join(sorted(used)) or '(no tunables)'}",
            )
    values = MappingProxyType({c.sym: c.value for c in consts if c.value is not None})
    return Constants(tuple(consts), values, MappingProxyType(entry_dims), MappingProxyType(tunables), frozenset(names.used),
                     MappingProxyType(dynamic))


def _named_once(ctx: Context, named) -> list:
    """The shape classes, those a compute reads beside each other (``ShapeRelations.beside``: ``X[i, j + 1] -
    X[i, j]`` into Y) merged where this call gives them one static size: one constant, the same program as
    when such reads tied extents."""
    classes = ctx.shapes.classes
    parent = list(range(len(classes)))

    def find(c: int) -> int:
        while parent[c] != c:
            c = parent[c]
        return c

    def size(c: int):
        pname, axis = classes[c].members[0]
        return None if named & set(classes[c].members) else ctx.spec.shapes[pname][axis]

    for a, b in ctx.shapes.beside:
        if size(a) is not None and size(a) == size(b):
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    if all(parent[c] == c for c in range(len(classes))):
        return list(classes)
    order = {p.name: k for k, p in enumerate(ctx.graph.entry_task.params)}
    out = []
    for c in (c for c in range(len(classes)) if find(c) == c):
        group = [classes[d] for d in range(len(classes)) if find(d) == c]
        members = sorted((m for g in group for m in g.members), key=lambda m: (order[m[0]], m[1]))
        reasons = sorted({r for g in group for r in g.reasons}, key=lambda l: (l.file, l.line))
        out.append(DimClass(tuple(members), tuple(reasons)))
    return out


def _dynamic_upper(ctx: Context, members) -> int:
    """The largest size a dynamic dimension may take: every tensor holding it stays 32-bit indexable with its
    static dimensions as they are and its other dynamic ones at 1 (the runtime checks each call's product)."""
    named = dynamic_members(ctx.mapping)
    classes = [c for c in ctx.shapes.classes if named & set(c.members)]
    upper = INDEX_LIMIT
    for pname, axis in members:
        static = 1
        for a, n in enumerate(ctx.spec.shapes[pname]):
            if a != axis and not any((pname, a) in c.members for c in classes):
                static *= max(n, 1)
        upper = min(upper, INDEX_LIMIT // static)
    return max(upper, 1)


def _tunable_settings(ctx: Context) -> dict:
    """name -> (located value, instance) over the reachable instances; one value per tunable."""
    out: dict = {}
    for inst in ctx.reachable():
        for name, val in inst.tunables.items():
            if name in out and out[name][0].value != val.value:
                first = out[name][1]
                raise LoweringError(
                    f"tunable {name} is {val.value} here but {out[name][0].value} in {first.name}; "
                    "one kernel has one value per tunable",
                    val.loc,
                )
            out.setdefault(name, (val, inst))
    return out


def _tunables_in_order(graph: TaskGraph) -> dict[str, tuple[TaskDef, object]]:
    """Every tunable the logic uses, in the order the program first needs it (the constants' order)."""
    found: dict[str, tuple[TaskDef, object]] = {}

    def note(e, task: TaskDef, loc) -> None:
        for leaf in leaves(e) if isinstance(e, Expr) else ():
            if isinstance(leaf, Tunable) and leaf.name not in found:
                found[leaf.name] = (task, loc)

    def arg(a, task: TaskDef) -> None:
        if isinstance(a, TileRef):
            arg(a.partition.source, task)
            for t in a.partition.tile:
                note(t, task, a.partition.loc)
            for i in a.index:
                note(i, task, a.loc)

    def body(task: TaskDef, stmts, seen: set) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                for e in s.extents:
                    note(e, task, s.loc)
                body(task, s.body, seen)
            elif isinstance(s, Launch):
                for a in s.args:
                    arg(a, task)
                callee = graph.tasks[s.callee]
                if callee.name not in seen:
                    visit(callee, seen | {callee.name})
            elif isinstance(s, PrimCall) and s.expr is not None:
                for node in el.nodes(s.expr):
                    if isinstance(node, el.IntExpr):
                        note(node.expr, task, s.loc)

    def visit(task: TaskDef, seen: set) -> None:
        for t in task.temps:
            for e in t.shape:
                note(e, task, t.loc)
        body(task, task.body, seen)
        for p in task.partitions:  # partitions never indexed still name their tunables
            for t in p.tile:
                note(t, task, p.loc)

    visit(graph.entry_task, {graph.entry})
    return found
