"""The design's implicit host: a mapping whose HOST instance names a task the logic never defines.

The design notes' GEMM example writes two tasks, a leaf and a block task whose own ``parallel_range`` launches the
leaf on whole-K panels (``Ap[i, :]``, ``Bp[:, j]``), and lets the mapping name a host task
(``task_name: gemm_host_logic``, ``calls: {gemm_block_logic: ...}``) that the logic never defines. SepTran reads
that as the README's three levels, written by the compiler instead of the user:

- the host is the block task's grid: its partitions and its ``parallel_range``, which launches, once per grid
  point, a program named after the block task (so the mapping's ``calls`` and the block instance's ``mems`` and
  ``pipeline`` apply to it) on the tiles the leaves were given;
- in that program, a leaf whose only primitive is a matrix product (``gemm`` and its transposed forms) and whose
  contracted dimension it was given whole as ``:`` over tiles (``Ap[i, :]``) runs once per tile along it, in a
  ``task.range`` (which ``pipeline: N`` pipelines), as TileLang's own GEMM loops over K: the same sum, with the
  panels staged a tile at a time;
- a block task without a ``parallel_range`` of leaves is launched once, on the whole tensors: a grid of one program.

The same grid of one serves an explicit host task whose body is one ``task.launch`` (no ``parallel_range``).
Everything is a rewrite of the traced graph: the lowering sees the three levels the README spells.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from septran.errors import FrontendError, SourceLoc
from septran.expr import Const, Expr, Var, fresh
from septran.frontend.graph import assemble, build_graph
from septran.frontend.ir import FULL, Launch, Loop, Param, Partition, PrimCall, ScalarParam, TaskDef, TaskGraph, TileRef
from septran.frontend.tracer import TaskFunction


@dataclass(frozen=True)
class ImplicitHost:
    """The host task a mapping names and the logic does not define: it launches the logic's task ``top``."""

    name: str
    top: TaskFunction
    loc: SourceLoc  # the mapping's task_name line

    @property
    def optional(self) -> tuple[str, ...]:
        return self.top.optional


def find(names: dict, mapping) -> Optional[ImplicitHost]:
    """The implicit host of ``mapping`` over a logic defining ``names``: where its entry instance's task is not
    defined and its ``calls`` names exactly one task, which is the logic's top (no task of the logic refers to it:
    a misspelt host task over a logic that has one is still reported as unknown). None otherwise."""
    entry = mapping.instance(mapping.entrypoint.value)
    if isinstance(names.get(entry.task_name.value), TaskFunction) or len(entry.calls) != 1:
        return None
    (top,) = entry.calls
    found = names.get(top)
    if not isinstance(found, TaskFunction):
        return None
    tasks = {id(v): v for v in names.values() if isinstance(v, TaskFunction) and v is not found}
    if any(found.name in t.fn.__code__.co_names for t in tasks.values()):
        return None
    return ImplicitHost(entry.task_name.value, found, entry.task_name.loc)


def graph_of(logic, absent=None) -> TaskGraph:
    """The task graph a kernel compiles: the logic's, under its implicit host where it has one, and an entry task
    that launches one task without a ``parallel_range`` made a grid of one program."""
    if isinstance(logic, ImplicitHost):
        return _under_host(build_graph(logic.top, absent), logic)
    return _grid_of_one(build_graph(logic, absent))


def _grid_of_one(graph: TaskGraph) -> TaskGraph:
    entry = graph.entry_task
    if len(entry.body) != 1 or not isinstance(entry.body[0], Launch) or graph.tasks[entry.body[0].callee].leaf:
        return graph
    launch = entry.body[0]
    loop = Loop((fresh("g"),), (Const(1),), True, (launch,), launch.loc)
    return assemble(graph.entry, {**graph.tasks, entry.name: replace(entry, body=(loop,))})


def _under_host(graph: TaskGraph, host: ImplicitHost) -> TaskGraph:
    top = graph.entry_task
    if host.name in graph.tasks:
        raise FrontendError(f"the mapping's host task {host.name} is launched by the logic but never defined", top.loc)
    tasks = dict(graph.tasks)
    body = top.body
    grid = len(body) == 1 and isinstance(body[0], Loop) and body[0].parallel and body[0].body \
        and all(isinstance(s, Launch) and graph.tasks[s.callee].leaf for s in body[0].body)
    if grid:
        host_task, program = _split(graph, top, body[0], host)
        tasks[program.name] = program
    else:
        for s in body:
            if isinstance(s, Loop) and s.parallel and any(isinstance(x, Launch) and not graph.tasks[x.callee].leaf for x in s.body):
                raise FrontendError(
                    f"{top.name} launches inner tasks from a parallel_range: it is a host task itself, and the mapping's "
                    f"{host.name} has nothing to launch", s.loc,
                    hint=f"map {top.name} on the HOST instance (task_name: {top.name}) instead of {host.name}")
        host_task = _launch_once(top, host)
    tasks[host.name] = host_task
    return assemble(host.name, {host.name: host_task, **{k: v for k, v in tasks.items() if k != host.name}})


def _launch_once(top: TaskDef, host: ImplicitHost) -> TaskDef:
    """A host that launches ``top`` once on its whole tensors: a grid of one program."""
    params = tuple(Param(fresh(p.name), p.position, top.loc) for p in top.params)
    scalars = tuple(ScalarParam(fresh(s.name), s.default, top.loc) for s in top.scalars)
    launch = Launch(top.name, params, top.loc, scalars)
    loop = Loop((fresh("g"),), (Const(1),), True, (launch,), top.loc)
    return TaskDef(host.name, params, False, (loop,), (), top.loc, (), scalars, top.dtypes, top.absent)


def _split(graph: TaskGraph, top: TaskDef, loop: Loop, host: ImplicitHost) -> tuple[TaskDef, TaskDef]:
    """The host (``top``'s partitions and grid, launching one program per point) and the program (named as ``top``:
    the leaves on the tiles the grid point gives, a contraction given whole looped over its tiles)."""
    if top.temps:
        raise FrontendError(f"{top.name} allocates {top.temps[0].name} outside its grid's programs", top.temps[0].loc,
                            hint=f"allocate it in a task each program runs, or write the host task {host.name} yourself")
    given: list = []  # the distinct tiles the leaves take, in order: the program's parameters
    for launch in loop.body:
        for arg in launch.args:
            if not any(_same(arg, g) for g in given):
                clash = next((g for g in given if _root_name(g) == _root_name(arg)), None)
                if clash is not None:
                    raise FrontendError(
                        f"the leaves of {top.name} take two different tiles of {_root_name(arg)}; under the implicit host "
                        f"each program takes one tile of each tensor", launch.loc,
                        hint=f"write the host task {host.name} and a program task yourself (the README's GEMM)")
                given.append(arg)
    params = tuple(Param(fresh(_root_name(a)), k, top.loc) for k, a in enumerate(given))
    scalars = tuple(ScalarParam(fresh(s.name), s.default, top.loc) for s in top.scalars)
    scalar_of = dict(zip(top.scalars, scalars))
    partitions: list[Partition] = []
    stmts = []
    for launch in loop.body:
        args = tuple(params[next(k for k, g in enumerate(given) if _same(a, g))] for a in launch.args)
        inner = Launch(launch.callee, args, launch.loc, tuple(scalar_of.get(s, s) for s in launch.scalars))
        stmts.append(_contraction_loop(graph, launch, inner, partitions) or inner)
    program = TaskDef(top.name, params, False, tuple(stmts), tuple(partitions), top.loc, (), scalars, (), top.absent)
    grid = Loop(loop.vars, loop.extents, True, (Launch(top.name, tuple(given), loop.loc, top.scalars),), loop.loc)
    host_task = TaskDef(host.name, top.params, False, (grid,), top.partitions, top.loc, (), top.scalars, top.dtypes,
                        top.absent)
    return host_task, program


def _contraction_loop(graph: TaskGraph, outer: Launch, inner: Launch, partitions: list) -> Optional[Loop]:
    """``inner`` (a leaf launch in the program) as a ``task.range`` over tiles of its contracted dimension, where the
    leaf's one primitive is a matrix product and every operand of that dimension was given whole over tiles (``:``)
    of one size. None where it stays as it is."""
    leaf = graph.tasks[outer.callee]
    prims = [s for s in leaf.body if isinstance(s, PrimCall)]
    if len(prims) != 1 or len(leaf.body) != 1 or prims[0].signature.kind != "gemm":
        return None
    prim = prims[0]
    sig = prim.signature
    written = {letter for k, letters in enumerate(sig.dims) if sig.privileges[k].writes for letter in letters}
    contracted = {letter for letters in sig.dims for letter in letters} - written
    if len(contracted) != 1:
        return None
    (letter,) = contracted
    cuts: dict[int, int] = {}  # position of the launch's operand -> its axis along the contraction
    tile: Optional[Expr] = None
    for k, letters in enumerate(sig.dims):
        if letter not in letters:
            continue
        if not isinstance(prim.args[k], Param):
            return None
        position = next(i for i, p in enumerate(leaf.params) if p.sym == prim.args[k].sym)
        arg = outer.args[position]
        if not isinstance(arg, TileRef):
            return None
        axis = arg.rank - len(letters) + letters.index(letter)  # (leading batch dimensions)
        size = arg.partition.tile[axis]
        if arg.index[axis] is not FULL or size is None or (tile is not None and size != tile):
            return None
        tile, cuts[position] = size, axis
    k = fresh("k")
    args = list(inner.args)
    extent = None
    for position, axis in cuts.items():
        panel = inner.args[position]
        rank = outer.args[position].rank
        part = Partition(fresh(f"{panel.name}k"), panel, tuple(tile if d == axis else None for d in range(rank)), outer.loc)
        partitions.append(part)
        args[position] = TileRef(part, tuple(Var(k) if d == axis else Const(0) for d in range(rank)), outer.loc)
        extent = extent if extent is not None else part.shape[axis]
    return Loop((k,), (extent,), False, (replace(inner, args=tuple(args)),), outer.loc)


def _same(a, b) -> bool:
    """The same tile (or parameter) of the block task, wherever it was written."""
    if isinstance(a, TileRef) and isinstance(b, TileRef):
        return a.partition == b.partition and a.index == b.index
    return a == b


def _root_name(arg) -> str:
    while isinstance(arg, TileRef):
        arg = arg.partition.source
    return arg.name
