"""TaskGraph + Mapping + Target -> TileProgram: where every decision is made.

The rules (design.md section 3):

* a ``parallel_range`` of a processor whose target entry says ``grid: true``
  becomes the kernel grid, its last dimension blockIdx.x;
* the instance it launches is the body of one program instance, with that
  instance's ``threads``;
* where an instance's ``mems`` puts a parameter in another memory than its
  caller holds it, each region the instance hands on is staged: a buffer of
  the region's shape, a copy in (or a clear, for a reduction) before the first
  use and a copy out after the last write, placed in the outermost loop over
  which the region does not move, and decided by the parameter's privilege;
* ``pipeline: N`` turns the instance's sequential ranges into
  ``T.Pipelined(..., num_stages=N)``;
* a leaf launch is replaced by the target's implementation that
  ``leaf_task_bindings`` names.

No TileLang text is produced here; the emitter prints what this decides.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Optional

from septran.errors import LoweringError, SourceLoc
from septran.expr import BinOp, Const, Dim, Expr, GlobalExtent, GlobalStart, Sym, Tunable, Var, evaluate, leaves, simplify, substitute
from septran.frontend.ir import (Arg, Launch, Loop, Param, PrimCall, Privilege, ScalarParam, TaskDef, TaskGraph, Temp,
                                 root_param, walk)
from septran.frontend.shapes import ShapeRelations
from septran.lowering import tile_ir as ir
from septran.lowering.leaf_calls import LeafCalls
from septran.lowering.tile_ir import Why
from septran.mapping.schema import InstanceMapping, Mapping as MappingFile
from septran.target import Target

log = logging.getLogger(__name__)

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int32": 4}
GRID_NAMES = ("bx", "by", "bz")


@dataclass(frozen=True)
class View:
    """Where a task parameter's data is: a box of a tensor or buffer, in a memory space."""

    of: Sym
    offsets: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    space: str
    whole: bool
    # Per dimension of the logic's view of it: where the view starts in the whole
    # tensor it was cut from, and that tensor's extent (task.global_index / global_size).
    origin: tuple[tuple[Expr, Expr], ...] = ()


@dataclass
class _Scope:
    """An open statement list: the instance body or a loop body."""

    var: Optional[Sym]
    stmts: list
    post: list = field(default_factory=list)  # copies out, flushed when the scope closes
    stages: int = 1


@dataclass
class _Staged:
    buffer: ir.Buffer
    scope: _Scope  # where it is loaded or cleared; its copy out goes at this scope's end
    wrote: bool = False


@dataclass(frozen=True)
class Specialization:
    """What a call fixes: every entry parameter's shape and dtype."""

    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    scalars: Mapping[str, float] = field(default_factory=dict)  # the entry task's scalar parameters


class _Lowerer(LeafCalls):
    def __init__(self, graph: TaskGraph, mapping: MappingFile, target: Target, spec: Specialization, shapes: ShapeRelations):
        self.graph, self.mapping, self.target, self.spec = graph, mapping, target, spec
        self.consts: list[ir.Const] = []
        self.const_values: dict[Sym, int] = {}
        self.tunable_syms: dict[str, tuple[Sym, InstanceMapping]] = {}
        self.buffers: list[ir.Buffer] = []
        self.used_names: set[str] = {"T"}  # the emitted program's name for TileLang's language module
        self.entry_dims: dict[Expr, Expr] = {}
        self._stages_of: dict[Sym, int] = {}
        self._space_loc: dict[Sym, SourceLoc] = {}
        self._dtypes: dict[Sym, str] = {}
        self._shapes: dict[Sym, tuple[Expr, ...]] = {}
        self._next_address: dict[str, int] = {}
        self._prologue: list = []  # vendor descriptors, before anything else in a program
        self._released: list[str] = []  # memories whose vendor state is released at a program's end
        self._pending: set[str] = set()  # memories with transfers in flight
        self._name_dims(shapes)
        self.global_space = next(m.name for m in target.memories.values() if m.is_global)

    # names and constants ---------------------------------------------------
    def _unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.used_names:
            k += 1
            name = f"{base}_{k}"
        self.used_names.add(name)
        return name

    def _name_dims(self, shapes: ShapeRelations) -> None:
        entry = self.graph.entry_task
        roles = {p.name: self._role(p.name) for p in entry.params}
        for cls in shapes.classes:
            inputs = [m for m in cls.members if roles[m[0]] != "output"] or list(cls.members)
            pname, axis = inputs[0]
            sym = Sym(self._unique(f"{pname}_dim{axis}"))
            value = self.spec.shapes[pname][axis]
            tied = ", ".join(f"{p}.shape[{a}]" for p, a in cls.members)
            self._add_const(sym, value, Why(f"problem size {tied}", logic=cls.reasons[0] if cls.reasons else None))
            for p, a in cls.members:
                self.entry_dims[Dim(entry.param(p).sym, a)] = Var(sym)

    def _add_const(self, sym: Sym, value: int, why: Why) -> None:
        self.consts.append(ir.Const(sym, value, why))
        self.const_values[sym] = value

    def _role(self, param: str) -> str:
        return self.graph.privilege(self.graph.entry, param).role

    def _tunable(self, name: str, chain: tuple[InstanceMapping, ...], use: SourceLoc) -> Expr:
        for inst in reversed(chain):
            if name in inst.tunables:
                val = inst.tunables[name]
                known = self.tunable_syms.get(name)
                if known is None:
                    sym = Sym(self._unique(name))
                    self.tunable_syms[name] = (sym, inst)
                    self._add_const(sym, val.value, Why(f"tunable {name} = {val.value}", mapping=val.loc))
                    return Var(sym)
                sym, first = known
                if self.const_values[sym] != val.value:
                    raise LoweringError(
                        f"tunable {name} is {val.value} here but {self.const_values[sym]} in {first.name}; "
                        "one kernel has one value per tunable",
                        val.loc,
                    )
                return Var(sym)
        where = next((inst.key_loc("tunables") for inst in reversed(chain) if inst.tunables), chain[-1].loc)
        # Name the partition that writes the tunable, not a line that only uses its effect (Ap.shape[1]).
        use = next((p.loc for t in self.graph.tasks.values() for p in t.partitions if Tunable(name) in p.tile), use)
        raise LoweringError(
            f"the logic uses tunable {name} (at {use}) but the mapping does not set it",
            where,
            hint=f"add `tunables: {{{name}: <int>}}` to {chain[-1].name} or an instance above it",
        )

    def _value(self, e: Expr) -> int:
        return evaluate(e, {Var(s): v for s, v in self.const_values.items()})

    # expressions -------------------------------------------------------------
    def _subst(self, e: Expr, views: Mapping[str, View], task: TaskDef, chain, loops: Mapping[Sym, Expr], use: SourceLoc) -> Expr:
        env: dict[Expr, Expr] = {}
        for leaf in leaves(e):
            if isinstance(leaf, Tunable):
                env[leaf] = self._tunable(leaf.name, chain, use)
            elif isinstance(leaf, Dim):
                p = next(p for p in task.params if p.sym == leaf.param)
                view = views[p.name]
                if leaf.axis >= len(view.extents):
                    raise LoweringError(f"{p.name}.shape[{leaf.axis}] does not exist: {p.name} has rank {len(view.extents)}", use)
                env[leaf] = view.extents[leaf.axis]
            elif isinstance(leaf, (GlobalStart, GlobalExtent)):
                p = next(p for p in task.params if p.sym == leaf.param)
                origin = views[p.name].origin
                if leaf.axis >= len(origin):
                    raise LoweringError(f"{leaf}: {p.name} has rank {len(origin)}", use)
                env[leaf] = origin[leaf.axis][0 if isinstance(leaf, GlobalStart) else 1]
            elif isinstance(leaf, Var) and leaf.sym in loops:
                env[leaf] = loops[leaf.sym]
        out = substitute(e, env)
        return _fold_same_ceildiv(out)

    def _region(self, arg: Arg, views, task, chain, loops) -> View:
        if isinstance(arg, (Param, Temp)):
            return views[arg.name]
        base = self._region(arg.partition.source, views, task, chain, loops)
        offsets, extents, origin = [], [], []
        part = arg.partition
        for axis, (idx, tile) in enumerate(zip(arg.index, part.tile)):
            if arg.is_whole(axis):
                offsets.append(base.offsets[axis])
                extents.append(base.extents[axis])
                origin.append(base.origin[axis])
                continue
            t = self._subst(tile, views, task, chain, loops, part.loc)
            i = self._subst(idx, views, task, chain, loops, arg.loc)
            # A tile may overhang the tensor (copies are bounds-checked), never the tile that holds it.
            if base.extents[axis] not in self.entry_dims.values():
                outer = self._value(base.extents[axis])
                inner = self._value(t)
                if outer % inner:
                    raise LoweringError(
                        f"tile {tile} = {inner} does not divide the {outer} elements of the tile it splits "
                        f"(dimension {axis} of {part.sym.name})",
                        part.loc,
                        hint="choose tunables where each inner tile divides the tile that holds it",
                    )
            offsets.append(simplify(base.offsets[axis] + i * t))
            extents.append(t)
            origin.append((simplify(base.origin[axis][0] + i * t), base.origin[axis][1]))
        whole = base.whole and all(arg.is_whole(a) for a in range(part.rank))
        return View(base.of, tuple(offsets), tuple(extents), base.space, whole, tuple(origin))

    # the program ---------------------------------------------------------------
    def lower(self) -> ir.TileProgram:
        entry_task = self.graph.entry_task
        entry = self.mapping.instance(self.mapping.entrypoint.value)
        params: list[ir.TensorParam] = []
        views: dict[str, View] = {}
        for p in entry_task.params:
            rank = len(self.spec.shapes[p.name])
            shape = tuple(self.entry_dims.get(Dim(p.sym, a), Const(self.spec.shapes[p.name][a])) for a in range(rank))
            tp = ir.TensorParam(Sym(self._unique(p.name)), shape, self.spec.dtypes[p.name], self._role(p.name))
            params.append(tp)
            self._dtypes[tp.sym] = tp.dtype
            self._shapes[tp.sym] = shape
            views[p.name] = View(tp.sym, tuple(Const(0) for _ in shape), shape, self.global_space, True,
                                 tuple((Const(0), e) for e in shape))
        for sp in entry_task.scalars:
            views[sp.name] = float(self.spec.scalars.get(sp.name, sp.default))
        ordered = [t for t in params if t.role != "output"] + [t for t in params if t.role == "output"]
        proc = self.target.procs[entry.proc.value]
        if not proc.grid:
            raise LoweringError(
                f"the entrypoint {entry.name} must run on a processor that launches the grid",
                entry.proc.loc,
                hint=f"use one of: {', '.join(p.name for p in self.target.procs.values() if p.grid)}",
            )
        kernel = self._grid(entry, entry_task, views)
        return ir.TileProgram(
            name=entry_task.name.removesuffix("_logic") or entry_task.name,
            target=self.target.name,
            language=self.target.language,
            consts=tuple(self.consts),
            params=tuple(ordered),
            kernel=kernel,
            logic_file=entry_task.loc.file,
            mapping_file=self.mapping.file,
        )

    def _grid(self, inst: InstanceMapping, task: TaskDef, views) -> ir.KernelLaunch:
        body = task.body
        if len(body) != 1 or not isinstance(body[0], Loop) or not body[0].parallel:
            loc = body[0].loc if body else task.loc
            raise LoweringError(
                f"{task.name} runs on {inst.proc.value}, which launches a grid: its body must be one task.parallel_range loop",
                loc,
                hint="move other work into the task it launches",
            )
        loop = body[0]
        launches = loop.body
        if len(launches) != 1 or not isinstance(launches[0], Launch):
            raise LoweringError(
                "a grid loop must contain exactly one task.launch (one program per grid point)", loop.loc
            )
        if len(loop.vars) > len(GRID_NAMES):
            raise LoweringError(f"a grid has at most {len(GRID_NAMES)} dimensions, this one has {len(loop.vars)}", loop.loc)
        chain = (inst,)
        extents = [self._subst(e, views, task, chain, {}, loop.loc) for e in loop.extents]
        # The last (fastest-varying) dimension becomes blockIdx.x, as hand-written TileLang does.
        grid_syms = {v: Sym(self._unique(GRID_NAMES[len(loop.vars) - 1 - k])) for k, v in enumerate(loop.vars)}
        grid = tuple((grid_syms[v], e) for v, e in reversed(list(zip(loop.vars, extents))))
        launch = launches[0]
        callee = self.mapping.instance(inst.calls[launch.callee].value)
        callee_task = self.graph.tasks[launch.callee]
        loops = {v: Var(s) for v, s in grid_syms.items()}
        callee_views = {
            callee_task.params[k].name: self._region(arg, views, task, chain, loops) for k, arg in enumerate(launch.args)
        }
        callee_views.update(_scalars(launch, callee_task, views))
        threads = None
        if self.target.has_threads:
            if callee.threads is None:
                raise LoweringError(
                    f"{callee.name} is one program of the grid and needs a thread count", callee.loc, hint="add `threads: <n>`, e.g. 128"
                )
            threads = callee.threads.value
        root = _Scope(None, [])
        self._body(callee, callee_task, callee_views, chain + (callee,), [root], {})
        self._close(root)
        for name in self._released:
            mem = self.target.memories[name]
            root.stmts.append(ir.VendorOp("release", mem.ops["release"], (), Why(f"release this program's {name} descriptors")))
        root.stmts[:0] = self._prologue
        self._check_capacity()
        order = list(self.target.memories)
        buffers = sorted(self.buffers, key=lambda b: order.index(b.space))
        why = Why(f"grid of {task.name}'s parallel_range, one program per tile; {callee.name} is each program",
                  mapping=inst.key_loc("proc"), logic=loop.loc)
        return ir.KernelLaunch(grid, threads, tuple(buffers), tuple(root.stmts), why)

    def _close(self, scope: _Scope) -> None:
        # A copy out through another memory allocates its buffer only now, in the order a reader expects.
        scope.post = [s for item in scope.post for s in (item() if callable(item) else [item])]
        scope.stmts.extend(scope.post)
        stores = sorted({self._space_of(dict(s.args)["src"].of) for s in scope.post if isinstance(s, ir.VendorOp) and s.op == "store"})
        for name in stores:  # results must have left the device before the program ends or the tile is reused
            mem = self.target.memories[name]
            if "sync" in mem.ops:
                scope.stmts.append(ir.VendorOp("sync", mem.ops["sync"], (), Why(f"wait for the transfers out of {name}")))
        scope.post = []

    def _space_of(self, sym: Sym) -> str:
        return next(b.space for b in self.buffers if b.sym == sym)

    def _body(self, inst, task: TaskDef, views, chain, scopes: list[_Scope], loops: dict) -> None:
        staged: dict[tuple, _Staged] = {}
        views = dict(views)
        for t in task.temps:
            views[t.name] = self._temp(t, inst, task, views, chain, loops)
        self._stmts(task.body, inst, task, views, chain, scopes, loops, staged, top=True)

    def _stmts(self, body, inst, task, views, chain, scopes, loops, staged, top) -> None:
        for stmt in body:
            if isinstance(stmt, Loop):
                self._loop(stmt, inst, task, views, chain, scopes, loops, staged, top)
            elif isinstance(stmt, Launch):
                self._launch(stmt, inst, task, views, chain, scopes, loops, staged)
            elif isinstance(stmt, PrimCall):
                raise LoweringError(
                    f"{task.name} calls primitive {stmt.name!r} directly; primitives run through a bound leaf task",
                    stmt.loc,
                )

    def _loop(self, loop: Loop, inst, task, views, chain, scopes, loops, staged, top) -> None:
        if loop.parallel:
            raise LoweringError(
                f"task.parallel_range inside {task.name} ({inst.proc.value}) is not supported yet; "
                "only the grid's parallel range is",
                loop.loc,
            )
        extent = self._subst(loop.extents[0], views, task, chain, loops, loop.loc)
        var = Sym(self._unique(loop.vars[0].name))
        pipelined = top and inst.pipeline is not None
        stages = inst.pipeline.value if pipelined else None
        limit = self.target.dynamic_pipeline_stages
        dynamic = any(isinstance(l, Var) and l.sym not in self.const_values for l in leaves(extent))  # depends on the block
        clamped = pipelined and dynamic and limit is not None and stages > limit
        if clamped:
            log.info("%s: %s pipelines a loop with a trip count that is not a constant over at most %d stage(s), "
                     "not %d", inst.pipeline.loc, self.target.name, limit, stages)
            stages = limit
        scope = _Scope(var, [], stages=max(stages or 1, 1))
        inner_loops = dict(loops)
        inner_loops[loop.vars[0]] = Var(var)
        self._stmts(loop.body, inst, task, views, chain, scopes + [scope], inner_loops, staged, top=False)
        self._close(scope)
        if pipelined:
            text = f"sequential range of {task.name}, software-pipelined over {stages} stages"
            if clamped:
                text += f" ({self.target.name} takes at most {limit} where the trip count is not a constant)"
            why = Why(text, mapping=inst.pipeline.loc, logic=loop.loc)
        else:
            why = Why(f"sequential range of {task.name}", logic=loop.loc)
        scopes[-1].stmts.append(ir.For(var, extent, "pipelined" if pipelined else "serial", stages, tuple(scope.stmts), why))

    def _launch(self, launch: Launch, inst, task, views, chain, scopes, loops, staged) -> None:
        callee_task = self.graph.tasks[launch.callee]
        keep = _operand_ranks(callee_task) if callee_task.leaf else {}
        regions = []
        for k, arg in enumerate(launch.args):
            view = self._region(arg, views, task, chain, loops)
            pname = callee_task.params[k].name
            priv = self.graph.privilege(callee_task.name, pname)
            regions.append(self._stage(view, arg, priv, inst, task, scopes, staged, launch, keep.get(pname)))
        self._sync_pending(scopes[-1], launch)
        if callee_task.leaf:
            scopes[-1].stmts.extend(self._leaf(launch, callee_task, regions, inst, _scalars(launch, callee_task, views)))
            return
        callee = self.mapping.instance(inst.calls[launch.callee].value)
        callee_views = {callee_task.params[k].name: v for k, v in enumerate(regions)}
        callee_views.update(_scalars(launch, callee_task, views))
        self._body(callee, callee_task, callee_views, chain + (callee,), scopes, {})

    def _reduced_into(self, task: TaskDef, param: str) -> bool:
        """Whether a primitive reduces into ``param`` anywhere below ``task`` (gemm's C += ...)."""
        for stmt, _ in walk(task.body):
            if isinstance(stmt, PrimCall):
                sig = stmt.signature
                if any(root_param(a).name == param and sig.privileges[k] is Privilege.REDUCE for k, a in enumerate(stmt.args)):
                    return True
            elif isinstance(stmt, Launch):
                callee = self.graph.tasks[stmt.callee]
                if any(root_param(a).name == param and self._reduced_into(callee, callee.params[k].name)
                       for k, a in enumerate(stmt.args)):
                    return True
        return False

    def _temp(self, t: Temp, inst, task: TaskDef, views, chain, loops) -> View:
        """A temp: a buffer of the task's own, in the memory its mapping names, for one run of the task."""
        space = inst.mems[t.name]
        mem = self.target.memories[space.value]
        if mem.is_global:
            raise LoweringError(f"temp {t.name} cannot live in {space.value}: a program allocates temps on chip", space.loc)
        shape = tuple(self._subst(e, views, task, chain, loops, t.loc) for e in t.shape)
        if t.dtype_of is not None:
            dtype = self._dtypes[views[t.dtype_of].of]
        else:
            dtype = _accum_dtype(inst)
        sym = Sym(self._unique(t.name))
        why = Why(f"temp {t.name} of {task.name}: {'x'.join(str(self._value(e)) for e in shape)} {dtype} in {space.value} "
                  f"({inst.name}.mems)", mapping=space.loc, logic=t.loc)
        self._new_buffer(sym, shape, dtype, mem, why, space.loc)
        return View(sym, tuple(Const(0) for _ in shape), shape, space.value, True, tuple((Const(0), e) for e in shape))

    def _stage(self, view: View, arg: Arg, priv: Privilege, inst, task, scopes, staged, launch: Launch, keep=None) -> View:
        """Stages ``view`` where the instance's mems put it; ``keep``: the rank a leaf operand needs
        (leading dimensions of one element, a batch of one, are dropped from the staged buffer)."""
        param = root_param(arg).name
        space = inst.mems.get(param)
        if space is None or space.value == view.space or priv is Privilege.NONE:
            return view  # already there, or only where it sits is used (task.global_index)
        mem = self.target.memories[space.value]
        if mem.is_global:
            raise LoweringError(f"{inst.name} cannot move {param} into {space.value} inside a program", space.loc)
        free = {l.sym for e in view.offsets for l in leaves(e) if isinstance(l, Var)}
        scope = next((s for s in reversed(scopes) if s.var in free), scopes[0])
        key = (param, view.of, view.offsets, view.extents, id(scope))
        entry = staged.get(key)
        shape = view.extents
        # A leaf's operand drops leading dimensions of one (a batch of one, one head):
        # down to the rank its primitives read it at, or to one dimension.
        while keep is not None and len(shape) > max(keep, 1) and shape[0] == Const(1):
            shape = shape[1:]
        if entry is not None:
            shape = entry.buffer.shape
        zeros = tuple(Const(0) for _ in shape)
        if entry is None:
            reduce_first = priv is Privilege.REDUCE
            dtype = self._dtypes[view.of]
            if reduce_first or self._reduced_into(task, param):  # an accumulator, whatever comes first
                dtype = _accum_dtype(inst)
            sym = Sym(self._unique(f"{param}_{mem.suffix}"))
            why = Why(f"{param} of {task.name} lives in {space.value} ({inst.name}.mems); "
                      f"{'accumulates' if reduce_first else 'holds'} one {'x'.join(str(self._value(e)) for e in shape)} tile",
                      mapping=space.loc, logic=launch.loc)
            buf = self._new_buffer(sym, shape, dtype, mem, why, space.loc, stages=scope.stages)
            entry = _Staged(buf, scope)
            staged[key] = entry
            tile = View(sym, zeros, shape, space.value, True, view.origin)
            options, via = self._copy_options(inst, param)
            if priv.reads:
                why = Why(f"copy {param} in before its first read ({priv.value})", mapping=space.loc, logic=launch.loc)
                scope.stmts.extend(self._copies(view, tile, options, via, why, param, shape, task, inst))
            elif reduce_first:
                why = Why(f"clear the accumulator {sym.name}: {param} is reduced into", mapping=space.loc, logic=launch.loc)
                scope.stmts.append(self._fill_zero(tile, why))
        tile = View(entry.buffer.sym, zeros, shape, space.value, True, view.origin)
        if priv.writes and not entry.wrote:
            entry.wrote = True
            options, via = self._copy_options(inst, param)
            why = Why(f"copy {param} out once, after its last write ({priv.value})", mapping=space.loc, logic=launch.loc)
            entry.scope.post.append(lambda: self._copies(tile, view, options, via, why, param, shape, task, inst))
        return tile

    def _copy_options(self, inst, param: str):
        """The mapping's T.copy keywords for ``param``, and the memory its transfers go through (``via``)."""
        opts = inst.copy.get(param, {})
        return tuple((k, v.value) for k, v in opts.items() if k != "via"), opts.get("via")

    def _copies(self, src: View, dst: View, options, via, why: Why, param: str, shape, task, inst) -> list:
        """One copy, or two through a buffer in the ``via`` memory (global memory's side takes the options)."""
        if via is None:
            return [self._copy(src, dst, options, why)]
        mem = self.target.memories[via.value]
        outer = src if self.target.memories[src.space].is_global else dst
        sym = Sym(self._unique(f"{param}_{mem.suffix}"))
        buf_why = Why(f"{param} of {task.name} passes through {via.value} ({inst.name}.copy.{param}.via)", mapping=via.loc)
        self._new_buffer(sym, shape, self._dtypes[outer.of], mem, buf_why, via.loc)
        mid = View(sym, tuple(Const(0) for _ in shape), shape, via.value, True, src.origin)
        hop = Why(why.text + f", through {via.value}", mapping=via.loc, logic=why.logic)
        if outer is src:
            return [self._copy(src, mid, options, hop), self._copy(mid, dst, (), hop)]
        return [self._copy(src, mid, (), hop), self._copy(mid, dst, options, hop)]

    # data movement: TileLang's own, or a vendor's calls for memories TileLang does not know -----
    def _new_buffer(self, sym: Sym, shape, dtype: str, mem, why: Why, loc: SourceLoc, stages: int = 1) -> ir.Buffer:
        """A buffer in ``mem``; ``loc``: the mapping line that put it there (for capacity errors); ``stages``: the
        pipeline stages of the loop it is loaded in (a memory that is per_stage holds one copy each)."""
        self._dtypes[sym] = dtype
        self._shapes[sym] = tuple(shape)
        self._stages_of[sym] = stages if mem.per_stage else 1
        self._space_loc[sym] = loc
        if not mem.placed:
            buf = ir.Buffer(sym, tuple(shape), dtype, mem.name, mem.alloc, why)
        else:
            size = DTYPE_BYTES[dtype] * _prod(self._value(e) for e in shape)
            offset = -(-self._next_address.get(mem.name, 0) // mem.align_bytes) * mem.align_bytes
            self._next_address[mem.name] = offset + size
            handle = "declare" in mem.ops
            address = Sym(self._unique(f"{sym.name}_addr")) if handle else sym
            self._add_const(address, offset, Why(f"byte offset of {sym.name} in {mem.name}"))
            buf = ir.Buffer(sym, tuple(shape), dtype, mem.name, None, why, address=address, handle=handle)
            if handle:
                self._prologue.append(ir.VendorOp("declare", mem.ops["declare"], (("buf", self._ir_region(View(sym, (Const(0),) * len(shape), tuple(shape), mem.name, True))),),
                                                  Why(f"describe {sym.name} to the vendor library"), result=sym))
            if "release" in mem.ops and mem.name not in self._released:
                self._released.append(mem.name)
        self.buffers.append(buf)
        return buf

    def _copy(self, src: View, dst: View, options, why: Why):
        src_mem, dst_mem = self.target.memories[src.space], self.target.memories[dst.space]
        if not (src_mem.placed or dst_mem.placed):
            return ir.Copy(self._ir_region(src), self._ir_region(dst), options, why)
        if options:
            raise LoweringError(f"copy options {dict(options)} are TileLang's; {dst.space} moves data with vendor calls",
                                self._space_loc.get(dst.of) or self._space_loc.get(src.of))
        op = "load" if dst_mem.placed else "store"
        mem = dst_mem if dst_mem.placed else src_mem
        if op == "load":
            self._pending.add(mem.name)
        return ir.VendorOp(op, mem.ops[op], (("dst", self._ir_region(dst)), ("src", self._ir_region(src))), why)

    def _fill_zero(self, tile: View, why: Why):
        mem = self.target.memories[tile.space]
        if mem.placed:
            return ir.VendorOp("fill_zero", mem.ops["fill_zero"], (("dst", self._ir_region(tile)),), why)
        return ir.Fill(tile.of, 0, why)

    def _sync_pending(self, scope: _Scope, launch: Launch) -> None:
        """Asynchronous transfers must be complete before the data is used."""
        for name in sorted(self._pending):
            mem = self.target.memories[name]
            if "sync" in mem.ops:
                scope.stmts.append(ir.VendorOp("sync", mem.ops["sync"], (), Why(f"wait for the transfers into {name} before they are read", logic=launch.loc)))
        self._pending.clear()

    def _ir_region(self, view: View) -> ir.Region:
        full = self._shapes[view.of]
        valid = []
        for off, ext, dim in zip(view.offsets, view.extents, full):
            # Offsets are multiples of the tile, so a tile that divides its dimension never overhangs.
            overhangs = not view.whole and self._value(dim) % self._value(ext) != 0
            valid.append(simplify(BinOp("min", ext, simplify(dim - off))) if overhangs else ext)
        dtype = self._dtypes[view.of]
        return ir.Region(view.of, view.offsets, view.extents, view.whole, tuple(valid),
                         full[-1] if len(full) > 1 else Const(1), dtype, self.target.dtype_codes.get(dtype))

    def _check_capacity(self) -> None:
        used: dict[str, list[tuple[ir.Buffer, int]]] = {}
        for buf in self.buffers:
            size = DTYPE_BYTES[buf.dtype] * _prod(self._value(e) for e in buf.shape) * self._stages_of[buf.sym]
            used.setdefault(buf.space, []).append((buf, size))
        for space, items in used.items():
            cap = self.target.memories[space].capacity_bytes
            # A placed memory also loses its alignment padding.
            total = max(sum(s for _, s in items), self._next_address.get(space, 0))
            if cap is not None and total > cap:
                biggest, _ = max(items, key=lambda x: x[1])
                detail = ", ".join(
                    f"{b.sym.name} {'x'.join(str(self._value(e)) for e in b.shape)} {b.dtype}"
                    + (f" x {self._stages_of[b.sym]} stages" if self._stages_of[b.sym] > 1 else "")
                    for b, _ in items
                )
                raise LoweringError(
                    f"{space} needs {total} bytes per program ({detail}), but {self.target.name} has {cap}",
                    self._space_loc[biggest.sym],
                    hint="use smaller tunables or fewer pipeline stages",
                )


def _accum_dtype(inst: InstanceMapping) -> str:
    """What an instance accumulates in: its accum_dtype, float32 by default."""
    return inst.accum_dtype.value if inst.accum_dtype is not None else "float32"


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _operand_ranks(leaf: TaskDef) -> dict[str, int]:
    """The rank the leaf's primitives read each parameter at (0: only where it sits is used)."""
    out: dict[str, int] = {}
    for prim in (s for s, _ in walk(leaf.body) if isinstance(s, PrimCall)):
        for k, arg in enumerate(prim.args):
            if isinstance(arg, Param):
                out[arg.name] = max(out.get(arg.name, 0), prim.signature.ranks[k] or 0)
    return out


def _scalars(launch: Launch, callee: TaskDef, views) -> dict[str, float]:
    """The callee's scalar parameters: what the launch passes (a caller's scalar or a number), else defaults."""
    out = {}
    for k, sp in enumerate(callee.scalars):
        arg = launch.scalars[k] if k < len(launch.scalars) else sp.default
        out[sp.name] = views[arg.name] if isinstance(arg, ScalarParam) else float(arg)
    return out


def _fold_same_ceildiv(e: Expr) -> Expr:
    """ceildiv(x, x) is 1: a tile split by its own size is one tile."""
    if isinstance(e, BinOp):
        a, b = _fold_same_ceildiv(e.lhs), _fold_same_ceildiv(e.rhs)
        if e.op == "ceildiv" and a == b:
            return Const(1)
        return simplify(BinOp(e.op, a, b))
    return e


def lower(graph: TaskGraph, mapping: MappingFile, target: Target, spec: Specialization, shapes: ShapeRelations) -> ir.TileProgram:
    from septran.lowering.bind import check_mapping

    check_mapping(graph, mapping, target)
    lw = _Lowerer(graph, mapping, target, spec, shapes)
    return lw.lower()
