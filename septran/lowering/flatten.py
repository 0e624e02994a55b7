"""Pass: flatten. The entry's grid, and one program: instances inlined into loops and invocations.

Each task's shapes, tiles, loop extents and scalars become the program's
expressions (constants, block indices, loop variables); each launch becomes an
``Invoke`` whose operands are views in the coordinates of the tensor or temp
they were cut from, with the memory the calling instance's ``mems`` wants
them in. Staging happens later; nothing here allocates or copies.
"""
from __future__ import annotations

import logging
from typing import Mapping

from septran.errors import LoweringError
from septran.expr import BinOp, Const, Dim, Expr, GlobalExtent, GlobalStart, Sym, Tunable, Var, leaves, simplify, substitute
from septran.frontend.ir import FULL, Arg, Launch, Loop, Param, PrimCall, ScalarParam, TaskDef, Temp, root_param, walk
from septran.lowering import flat_ir as fl
from septran.lowering import windows
from septran.lowering import grid_fold
from septran.lowering.constants import Constants, Context, Names
from septran.lowering.tile_ir import TensorParam, Why

log = logging.getLogger(__name__)

GRID_NAMES = ("bx", "by", "bz")


def flatten(ctx: Context, consts: Constants) -> tuple[fl.FlatProgram, frozenset]:
    """The flat program, and the names it uses (staging names buffers after them)."""
    return _Flattener(ctx, consts).program()


class _Flattener:
    def __init__(self, ctx: Context, consts: Constants):
        self.ctx, self.consts = ctx, consts
        self.names = Names(consts.names)
        self.global_space = next(m.name for m in ctx.target.memories.values() if m.is_global)
        self.tensor_syms: set = set()  # the entry's tensors (a window may run past a tensor's end, not a temp's)
        self.scalar_values: dict[Sym, float] = {}  # the value of each scalar of the task being flattened (task.as_index)

    def program(self):
        ctx = self.ctx
        entry_task = ctx.graph.entry_task
        inst = ctx.instance(ctx.mapping.entrypoint.value)
        tensors, views = [], {}
        for p in entry_task.params:
            rank = len(ctx.spec.shapes[p.name])
            shape = tuple(self.consts.entry_dims.get(Dim(p.sym, a), Const(ctx.spec.shapes[p.name][a])) for a in range(rank))
            shape = shape or (Const(1),)  # a tensor of rank 0 is one element: the kernel passes it as a (1,) view
            role = ctx.graph.privilege(entry_task.name, p.name).role
            t = TensorParam(self.names.new(p.name), shape, ctx.spec.dtypes[p.name], role)
            tensors.append(t)
            self.tensor_syms.add(t.sym)
            views[p.name] = fl.View(t.sym, tuple(Const(0) for _ in shape), shape, self.global_space, True,
                                    tuple((Const(0), e) for e in shape))
        scalars = {sp.name: float(ctx.spec.scalars.get(sp.name, sp.default)) for sp in entry_task.scalars}
        self.scalar_values.update({sp.sym: scalars[sp.name] for sp in entry_task.scalars})
        loop = entry_task.body[0]
        launch = loop.body[0]
        extents = [self._subst(e, entry_task, views, {}, loop.loc) for e in loop.extents]
        # The last (fastest-varying) dimension becomes blockIdx.x, as hand-written TileLang does; beyond three,
        # the outer dimensions share blockIdx.z (grid_fold.py).
        grid, loops, folded = grid_fold.fold(list(loop.vars), extents, lambda k: self.names.new(GRID_NAMES[k]))
        callee = ctx.instance(inst.calls[launch.callee].value)
        callee_task = ctx.graph.tasks[launch.callee]
        indices: list[fl.IndexUse] = []
        regions = [self._region(a, entry_task, views, loops, indices) for a in launch.args]
        operands = tuple(
            fl.Operand(root_param(a).name, r, None, ctx.graph.privilege(callee_task.name, callee_task.params[k].name), None)
            for k, (a, r) in enumerate(zip(launch.args, regions))
        )
        windows.refuse_written_at_grid(launch.args, operands)
        # A program's thread count: its mapping's `threads`, else the target's default (target.yaml threads.default).
        threads = (callee.threads.value if callee.threads is not None else ctx.target.default_threads) \
            if ctx.target.has_threads else None
        program = self._inner(launch, inst, entry_task, callee, callee_task, operands, tuple(indices),
                              _scalars(launch, callee_task, scalars))
        why = Why(f"grid of {entry_task.name}'s parallel_range, one program per tile; {callee.name} is each program",
                  mapping=inst.key_loc("proc"), logic=loop.loc)
        name = entry_task.name.removesuffix("_logic") or entry_task.name
        flat = fl.FlatProgram(name, tuple(tensors), grid, tuple(indices), threads, program, why, folded)
        return flat, frozenset(self.names.used)

    # expressions -------------------------------------------------------------
    def _subst(self, e: Expr, task: TaskDef, views: Mapping[str, fl.View], loops: Mapping[Sym, Expr], use) -> Expr:
        env: dict[Expr, Expr] = {}
        for leaf in leaves(e):
            if isinstance(leaf, Tunable):
                env[leaf] = self.consts.tunables[leaf.name]
            elif isinstance(leaf, Dim):
                view = views[_param(task, leaf.param)]
                if leaf.axis >= len(view.extents):
                    raise LoweringError(f"{leaf} does not exist: the tile has rank {len(view.extents)}", use)
                env[leaf] = view.extents[leaf.axis]
            elif isinstance(leaf, (GlobalStart, GlobalExtent)):
                origin = views[_param(task, leaf.param)].origin
                if leaf.axis >= len(origin):
                    raise LoweringError(f"{leaf}: the tile has rank {len(origin)}", use)
                env[leaf] = origin[leaf.axis][0 if isinstance(leaf, GlobalStart) else 1]
            elif isinstance(leaf, Var) and leaf.sym in loops:
                env[leaf] = loops[leaf.sym]
            elif isinstance(leaf, Var) and leaf.sym in self.scalar_values:  # task.as_index(pos)
                value = self.scalar_values[leaf.sym]
                if not value.is_integer() or abs(value) > 2**31 - 1:
                    raise LoweringError(f"scalar {leaf.sym.name} is {value:g}, but the logic uses it as an index "
                                        "(task.as_index): it must be an integer", use)
                env[leaf] = Const(int(value))
        return _fold_same_ceildiv(substitute(e, env))

    def _region(self, arg: Arg, task: TaskDef, views, loops, indices: list) -> fl.View:
        if isinstance(arg, (Param, Temp)):
            return views[arg.name]
        base = self._region(arg.partition.source, task, views, loops, indices)
        if arg.partition.by == "windows":  # starts in elements (septran/lowering/windows.py)
            return windows.region(self, arg, base, task, views, loops, indices)
        offsets, extents, origin = [], [], []
        part = arg.partition
        source = root_param(part.source).name
        for axis, (idx, tile) in enumerate(zip(arg.index, part.tile)):
            if arg.is_whole(axis):
                if tile is None and idx is not FULL and idx != Const(0):  # a whole dimension is one tile: index 0
                    indices.append(fl.IndexUse(self._subst(idx, task, views, loops, arg.loc), Const(1), axis,
                                               part.sym.name, source, str(idx), arg.loc))
                offsets.append(base.offsets[axis])
                extents.append(base.extents[axis])
                origin.append(base.origin[axis])
                continue
            t = self._subst(tile, task, views, loops, part.loc)
            i = self._subst(idx, task, views, loops, arg.loc)
            # A tile may overhang the tensor (copies are bounds-checked), never the tile that holds it.
            if base.extents[axis] not in self.consts.entry_dims.values():
                outer, inner = self.consts.value(base.extents[axis]), self.consts.value(t)
                if inner > 0 and outer % inner:
                    raise LoweringError(
                        f"tile {tile} = {inner} does not divide the {outer} elements of the tile it splits "
                        f"(dimension {axis} of {part.sym.name})",
                        part.loc,
                        hint="choose tunables where each inner tile divides the tile that holds it",
                    )
            grid = simplify(BinOp("ceildiv", base.extents[axis], t))
            indices.append(fl.IndexUse(i, _fold_same_ceildiv(grid), axis, part.sym.name, source, str(idx), arg.loc))
            offsets.append(simplify(base.offsets[axis] + i * t))
            extents.append(t)
            origin.append((simplify(base.origin[axis][0] + i * t), base.origin[axis][1]))
        whole = base.whole and all(arg.is_whole(a) for a in range(part.rank))
        return fl.View(base.of, tuple(offsets), tuple(extents), base.space, whole, tuple(origin))

    # tasks -----------------------------------------------------------------------
    def _inner(self, launch: Launch, caller, caller_task, inst, task: TaskDef, operands, indices, scalars) -> fl.Invoke:
        """An inner task's invocation: its temps, then its body with the operands as its parameters' views."""
        views = {task.params[k].name: op.view for k, op in enumerate(operands)}
        self.scalar_values.update({sp.sym: scalars[sp.name] for sp in task.scalars})
        temps = []
        for t in task.temps:
            view = self._temp(t, inst, task, views)
            views[t.name] = view
            temps.append((t, view))
        body = self._stmts(task.body, inst, task, views, scalars, {}, top=True)
        return fl.Invoke(launch, task, caller, caller_task, tuple(operands), tuple(indices), tuple(sorted(scalars.items())),
                         instance=inst, temps=tuple(temps), body=tuple(body))

    def _temp(self, t: Temp, inst, task: TaskDef, views) -> fl.View:
        space = inst.mem(t.name)
        if self.ctx.target.memories[space.value].is_global:
            raise LoweringError(f"temp {t.name} cannot live in {space.value}: a program allocates temps on chip", space.loc)
        shape = tuple(self._subst(e, task, views, {}, t.loc) for e in t.shape)
        return fl.View(self.names.new(t.name), tuple(Const(0) for _ in shape), shape, space.value, True,
                       tuple((Const(0), e) for e in shape))

    def _stmts(self, body, inst, task, views, scalars, loops, top: bool) -> list:
        out = []
        for stmt in body:
            if isinstance(stmt, Loop):
                out.append(self._loop(stmt, inst, task, views, scalars, loops, top))
            elif isinstance(stmt, Launch):
                out.append(self._launch(stmt, inst, task, views, scalars, loops))
            elif isinstance(stmt, PrimCall):
                raise LoweringError(
                    f"{task.name} calls primitive {stmt.name!r} directly; primitives run through a bound leaf task", stmt.loc)
        return out

    def _loop(self, loop: Loop, inst, task, views, scalars, loops, top: bool) -> fl.Loop:
        if loop.parallel:  # inside a program: its iterations, in any order, are one order of them
            return self._parallel_in_program(loop, inst, task, views, scalars, loops)
        extent = self._subst(loop.extents[0], task, views, loops, loop.loc)
        var = self.names.new(loop.vars[0].name)
        stages = inst.pipeline.value if top and inst.pipeline is not None else None
        limit = self.ctx.target.dynamic_pipeline_stages
        dynamic = any(isinstance(l, Var) and l.sym not in self.consts.values for l in leaves(extent))  # depends on the block
        clamped = stages is not None and dynamic and limit is not None and stages > limit
        if clamped:
            log.info("%s: %s pipelines a loop with a trip count that is not a constant over at most %d stage(s), "
                     "not %d", inst.pipeline.loc, self.ctx.target.name, limit, stages)
            stages = limit
        inner = dict(loops)
        inner[loop.vars[0]] = Var(var)
        body = self._stmts(loop.body, inst, task, views, scalars, inner, top=False)
        if stages is not None:
            text = f"sequential range of {task.name}, software-pipelined over {stages} stages"
            if clamped:
                text += f" ({self.ctx.target.name} takes at most {limit} where the trip count is not a constant)"
            why = Why(text, mapping=inst.pipeline.loc, logic=loop.loc)
        else:
            why = Why(f"sequential range of {task.name}", logic=loop.loc)
        return fl.Loop(var, extent, stages, tuple(body), why)

    def _parallel_in_program(self, loop: Loop, inst, task, views, scalars, loops) -> fl.Loop:
        """A parallel_range inside a program: one loop per dimension, outermost first. Iterations that need no
        order run in one (TileLang's T.Parallel takes element statements, not the copies and calls of a launch)."""
        inner, made = dict(loops), []
        for v, e in zip(loop.vars, loop.extents):
            made.append((self.names.new(v.name), self._subst(e, task, views, inner, loop.loc)))
            inner[v] = Var(made[-1][0])
        body = tuple(self._stmts(loop.body, inst, task, views, scalars, inner, top=False))
        why = Why(f"parallel range of {task.name} inside a program, in order", logic=loop.loc)
        for var, extent in reversed(made):
            body = (fl.Loop(var, extent, None, body, why, parallel=True),)
        return body[0]

    def _launch(self, launch: Launch, inst, task, views, scalars, loops) -> fl.Invoke:
        callee_task = self.ctx.graph.tasks[launch.callee]
        keep = _operand_ranks(callee_task) if callee_task.leaf else _reached_ranks(self.ctx.graph, callee_task)
        indices: list[fl.IndexUse] = []
        operands = []
        for k, arg in enumerate(launch.args):
            view = self._region(arg, task, views, loops, indices)
            pname = callee_task.params[k].name
            param = root_param(arg).name
            operands.append(fl.Operand(param, view, inst.mem(param),
                                       self.ctx.graph.privilege(callee_task.name, pname), keep.get(pname)))
        callee_scalars = _scalars(launch, callee_task, scalars)
        if callee_task.leaf:
            return fl.Invoke(launch, callee_task, inst, task, tuple(operands), tuple(indices),
                             tuple(sorted(callee_scalars.items())), binding=inst.leaf_task_bindings[callee_task.name])
        callee = self.ctx.instance(inst.calls[launch.callee].value)
        return self._inner(launch, inst, task, callee, callee_task, operands, indices, callee_scalars)


def _param(task: TaskDef, sym: Sym) -> str:
    return next(p.name for p in task.params if p.sym == sym)


def _operand_ranks(leaf: TaskDef) -> dict[str, int]:
    """The rank the leaf's primitives read each parameter at (0: only where it sits is used)."""
    out: dict[str, int] = {}
    for prim in (s for s, _ in walk(leaf.body) if isinstance(s, PrimCall)):
        for k, arg in enumerate(prim.args):
            if isinstance(arg, Param):
                out[arg.name] = max(out.get(arg.name, 0), prim.signature.ranks[k] or 0)
    return out


def _reached_ranks(graph, task: TaskDef) -> dict[str, int]:
    """An inner task's parameters: the rank the primitives below read each at (a tile staged for a task
    that hands it on to a GEMM drops leading dimensions of one, as a leaf's operand does)."""
    out: dict[str, int] = {}
    for launch in (s for s, _ in walk(task.body) if isinstance(s, Launch)):
        callee = graph.tasks[launch.callee]
        below = _operand_ranks(callee) if callee.leaf else _reached_ranks(graph, callee)
        for k, arg in enumerate(launch.args):
            root, name = root_param(arg), callee.params[k].name
            if isinstance(root, Param) and name in below:
                out[root.name] = max(out.get(root.name, 0), below[name])
    return out


def _scalars(launch: Launch, callee: TaskDef, scalars: Mapping[str, float]) -> dict[str, float]:
    """The callee's scalar parameters: what the launch passes (a caller's scalar or a number), else defaults."""
    out = {}
    for k, sp in enumerate(callee.scalars):
        arg = launch.scalars[k] if k < len(launch.scalars) else sp.default
        out[sp.name] = scalars[arg.name] if isinstance(arg, ScalarParam) else float(arg)
    return out


def _fold_same_ceildiv(e: Expr) -> Expr:
    """ceildiv(x, x) is 1: a tile split by its own size is one tile."""
    if isinstance(e, BinOp):
        a, b = _fold_same_ceildiv(e.lhs), _fold_same_ceildiv(e.rhs)
        if e.op == "ceildiv" and a == b:
            return Const(1)
        return simplify(BinOp(e.op, a, b))
    return e
