"""Pass: stage. Buffers and copies where an instance's ``mems`` moves a tile, and the leaves bound.

Where a calling instance wants an operand in another memory than the one its
data is in, the region gets a buffer of its own, a copy in (or a clear, for a
reduction) before its first use and a copy out after its last write, placed
in the outermost loop over which the region does not move, as its privilege
says. A region that lies inside a buffer already holding its tensor in the
wanted memory is a view into that buffer (a row tile written whole, then in
halves), so one region of a tensor never has two buffers that disagree: a
region that overlaps a staged one without lying inside it is refused.
Copies into memories TileLang does not know stay plain copies here; the next
pass (``place``) turns them into the vendor's calls.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from septran.errors import LoweringError
from septran.expr import BinOp, Const, Expr, Var, leaves, simplify
from septran.frontend.ir import Launch, PrimCall, Privilege, TaskDef, root_param, walk
from septran.lowering import clip_staged
from septran.lowering import flat_ir as fl
from septran.lowering import halo_stage
from septran.lowering import leaf_calls
from septran.lowering import recomputed
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Constants, Context, Names
from septran.lowering.dynamic import DynamicValue
from septran.lowering.intervals import Unbounded, bounds
from septran.lowering.linear import as_expr, difference
from septran.lowering.single_trips import drop_single_trips
from septran.lowering.tile_ir import Why


@dataclass
class _Scope:
    """An open statement list: the program body or a loop body."""

    var: Optional[object]
    stmts: list
    post: list = field(default_factory=list)  # copies out, made when the scope closes
    stages: int = 1
    residents: list = field(default_factory=list)


@dataclass
class _Resident:
    """A buffer that holds a box of a tensor or temp (``of``), in one memory."""

    of: object
    offsets: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    buffer: ir.Buffer
    space: str
    origin: tuple
    wrote: bool = False
    source: Optional[fl.View] = None  # where it is copied in from and out to (None: a temp, never copied)
    scope: Optional[_Scope] = None


def stage(ctx: Context, consts: Constants, flat: fl.FlatProgram, names: frozenset, assume=None) -> ir.TileProgram:
    # A loop of one trip stages nothing of its own: its regions do not move (single_trips.py; assume: one_tile.py).
    flat = drop_single_trips(consts, flat, assume or {})
    first = _Stager(ctx, consts, flat, names)
    program = first.program()
    if not ctx.target.clip_staged_loops:
        return program
    # Staged again where elementwise loops may run over an overhanging tile's in-bounds part only (clip_staged.py).
    clip = clip_staged.clippable(program.kernel.body, first.staged_valid, {b.sym for b in first.buffers})
    return _Stager(ctx, consts, flat, names, clip).program() if clip else program


class _Stager:
    def __init__(self, ctx: Context, consts: Constants, flat: fl.FlatProgram, names, clip=None):
        self.ctx, self.consts, self.flat = ctx, consts, flat
        # buffer name -> in-bounds extents: elementwise loops over that buffer run over those (clip_staged.py)
        self.clip = clip or {}
        self.target = ctx.target
        self.names = Names(names)
        self.buffers: list[ir.Buffer] = []
        self.shapes = {t.sym: t.shape for t in flat.tensors}
        self.dtypes = {t.sym: t.dtype for t in flat.tensors}
        self.env = dict(consts.intervals)
        # on-chip buffer -> the in-bounds extents of the overhanging tile staged into it, in the buffer's dimensions
        # (past them: the load's zeros)
        self.staged_valid: dict = {}
        # buffers copied from a tensor whose type holds less than the computed one (a bfloat16 row's float32 tile): a
        # value written out and read back through one of them was rounded on the way (holds_exactly)
        self.rounded: set = set()

    def program(self) -> ir.TileProgram:
        root = _Scope(None, [])
        for sym, extent in self.flat.grid:
            self.env[sym] = (0, max(bounds(extent, self.env)[1] - 1, 0))
        self._inner(self.flat.program, [root])
        self._close(root)
        order = list(self.target.memories)
        buffers = sorted(self.buffers, key=lambda b: order.index(b.space))
        kernel = ir.KernelLaunch(self.flat.grid, self.flat.threads, tuple(buffers), tuple(root.stmts), self.flat.why,
                                 self.flat.folded)
        params = self.flat.tensors
        ordered = tuple(t for t in params if t.role != "output") + tuple(t for t in params if t.role == "output")
        return ir.TileProgram(self.flat.name, self.target.name, self.target.language, self.consts.consts, ordered, kernel,
                              self.ctx.graph.entry_task.loc.file, self.ctx.mapping.file,
                              names=frozenset(self.names.used), index_bits=self.target.index_bits)

    # the tree ----------------------------------------------------------------------
    def _inner(self, s: fl.Invoke, scopes: list[_Scope]) -> None:
        inst = s.instance
        for t, view in s.temps:
            dtype = t.dtype or (self.dtypes[self._view_of_param(s, t.dtype_of)] if t.dtype_of else leaf_calls.accum_dtype(inst))
            # A type the target computes in another (cpu: bfloat16 in float32), as for its tensors: TileLang's C has
            # no bfloat16, and a bfloat16 temp failed to lower ("variables are used, but are not passed in").
            dtype = self._computed(dtype)
            space = inst.mem(t.name)
            mem = self.target.memories[space.value]
            why = Why(f"temp {t.name} of {s.callee.name}: {self._size(view.extents, t.name, space.loc)} {dtype} "
                      f"in {space.value} ({inst.name}.mems)", mapping=space.loc, logic=t.loc)
            buf = self._new_buffer(view.of, view.extents, dtype, mem, why, space.loc)
            scopes[-1].residents.append(_Resident(view.of, view.offsets, view.extents, buf, space.value, view.origin, True))
        for b in s.body:
            self._stmt(b, scopes)

    def _view_of_param(self, s: fl.Invoke, name: str):
        return s.operands[[p.name for p in s.callee.params].index(name)].view.of

    def _stmt(self, s, scopes: list[_Scope]) -> None:
        if isinstance(s, fl.Loop):
            lo, hi = bounds(s.extent, self.env)
            self.env[s.var] = (0, max(hi - 1, 0))
            scope = _Scope(s.var, [], stages=max(s.stages or 1, 1))
            for b in s.body:
                self._stmt(b, scopes + [scope])
            self._close(scope)
            kind = "pipelined" if s.stages is not None else "serial"
            scopes[-1].stmts.append(ir.For(s.var, s.extent, kind, s.stages, tuple(scope.stmts), s.why, s.parallel))
            return
        regions = [self._operand(op, s, scopes) for op in s.operands]
        if s.binding is not None:
            scopes[-1].stmts.extend(leaf_calls.lower_leaf(self, s, regions))
            return
        self._inner(_rebased(s, regions), scopes)

    def _close(self, scope: _Scope) -> None:
        # A copy out through another memory allocates its buffer only now, in the order a reader expects.
        scope.stmts.extend(st for item in scope.post for st in item())
        scope.post = []

    # staging -------------------------------------------------------------------------
    def _operand(self, op: fl.Operand, s: fl.Invoke, scopes: list[_Scope]) -> fl.View:
        view = op.view
        current = self._holder(view, scopes, None)
        if op.want is None or op.privilege is Privilege.NONE:
            return self._within(view, current)
        halo = s.caller.halo.get(op.param) if s.binding is not None else None
        if halo is not None and halo.any and not self.target.memories[op.want.value].is_global:
            if current is not None:
                halo_stage.refuse_held(op, s, halo)
            return halo_stage.stage_halo(self, op, s, scopes, halo, _Resident)
        if op.want.value == (current.space if current is not None else view.space):
            return self._use(current, view, op, s) if current is not None else view
        inside = self._holder(view, scopes, op.want.value)
        if inside is not None:
            return self._use(inside, view, op, s)
        mem = self.target.memories[op.want.value]
        if mem.is_global:
            raise LoweringError(f"{s.caller.name} cannot move {op.param} into {op.want.value} inside a program", op.want.loc)
        self._refuse_overlap(view, op, s, scopes)
        free = {l.sym for e in view.offsets for l in leaves(e) if isinstance(l, Var)}
        scope = next((sc for sc in reversed(scopes) if sc.var in free), scopes[0])
        shape = view.extents
        # A leaf's operand drops leading dimensions of one (a batch of one, one head):
        # down to the rank its primitives read it at, or to one dimension.
        while op.keep is not None and len(shape) > max(op.keep, 1) and shape[0] == Const(1):
            shape = shape[1:]
        source = self._within(view, current) if current is not None else view
        reduce_first = op.privilege is Privilege.REDUCE
        # A tensor kept in a type the target computes in another (cpu: bfloat16 as bits) is staged converted: the
        # vendor's copies convert it, and the program computes on the tile.
        dtype = self._staged(self.dtypes[source.of])
        if reduce_first or _reduced_into(self.ctx, s.caller_task, op.param):  # an accumulator, whatever comes first
            dtype = leaf_calls.accum_dtype(s.caller)
        sym = self.names.new(f"{op.param}_{mem.suffix}")
        why = Why(f"{op.param} of {s.caller_task.name} lives in {op.want.value} ({s.caller.name}.mems); "
                  f"{'accumulates' if reduce_first else 'holds'} one {self._size(shape, op.param, op.want.loc)} tile",
                  mapping=op.want.loc, logic=s.launch.loc)
        buf = self._new_buffer(sym, shape, dtype, mem, why, op.want.loc, stages=scope.stages, holds=view.of)
        res = _Resident(view.of, view.offsets, view.extents, buf, op.want.value, view.origin)
        scope.residents.append(res)
        tile = fl.View(sym, tuple(Const(0) for _ in shape), shape, op.want.value, True, view.origin)
        options, via = self._copy_options(s.caller, op.param)
        # A leaf that reads the tile only as task.recomputable's stored element computes it again from a rounded
        # copy (holds_exactly) and writes it whole: that copy would be read by nobody.
        read_back = self.holds_exactly(source.of) or not recomputed.only_recomputed(s, s.operands.index(op))
        if not read_back:
            self.rounded.add(sym)
        if op.privilege.reads and read_back:
            why = Why(f"copy {op.param} in before its first read ({op.privilege.value})", mapping=op.want.loc, logic=s.launch.loc)
            scope.stmts.extend(self._copies(source, tile, options, via, why, op.param, shape, s))
        elif reduce_first:
            why = Why(f"clear the accumulator {sym.name}: {op.param} is reduced into", mapping=op.want.loc, logic=s.launch.loc)
            scope.stmts.append(ir.Fill(sym, 0, why))
        res.source, res.scope = source, scope
        staged = self.region(source)
        if staged.valid != staged.extents:  # the tile overhangs its tensor: what of the buffer lies inside it
            self.staged_valid[sym] = tuple(staged.valid[len(staged.valid) - len(shape):])  # (a batch of one dropped)
        return self._use(res, view, op, s)

    def _use(self, res: _Resident, view: fl.View, op: fl.Operand, s: fl.Invoke) -> fl.View:
        if op.privilege.writes and not res.wrote and res.source is not None:
            res.wrote = True
            tile = fl.View(res.buffer.sym, tuple(Const(0) for _ in res.buffer.shape), res.buffer.shape, res.space, True, res.origin)
            options, via = self._copy_options(s.caller, op.param)
            why = Why(f"copy {op.param} out once, after its last write ({op.privilege.value})", mapping=op.want.loc, logic=s.launch.loc)
            src, shape = res.source, res.buffer.shape
            res.scope.post.append(lambda: self._copies(tile, src, options, via, why, op.param, shape, s))
        return self._within(view, res)

    def _holder(self, view: fl.View, scopes, space) -> Optional[_Resident]:
        """The innermost buffer (in ``space``, or any) that holds every element of ``view``."""
        for scope in reversed(scopes):
            for res in reversed(scope.residents):
                if res.of is view.of and (space is None or res.space == space) and self._relation(view, res) == "inside":
                    return res
        return None

    def _relation(self, view: fl.View, res: _Resident) -> str:
        """Whether ``view`` lies inside the box ``res`` holds, is disjoint from it, or overlaps it."""
        inside = True
        for off, ext, roff, rext in zip(view.offsets, view.extents, res.offsets, res.extents):
            try:
                lo, hi = bounds(as_expr(difference(off, roff, self.consts.values)), self.env)
            except Unbounded:  # a difference with no bounds: assume the worst
                return "overlap"
            try:
                e, r = self.consts.value(ext), self.consts.value(rext)
            except DynamicValue:  # extents with no number: what holds for every size they may take
                (_, e_hi), (r_lo, r_hi) = self.consts.range(ext), self.consts.range(rext)
                if hi + e_hi <= 0 or lo >= r_hi:
                    return "disjoint"
                inside = inside and lo >= 0 and (hi <= 0 if ext == rext else hi + e_hi <= r_lo)
                continue
            if hi + e <= 0 or lo >= r:
                return "disjoint"
            inside = inside and lo >= 0 and hi + e <= r
        return "inside" if inside else "overlap"

    def _refuse_overlap(self, view: fl.View, op: fl.Operand, s: fl.Invoke, scopes) -> None:
        for scope in scopes:
            for res in scope.residents:
                if res.of is view.of and (res.wrote or op.privilege.writes) and self._relation(view, res) == "overlap":
                    raise LoweringError(
                        f"{op.param} is staged twice in one program: this tile overlaps {res.buffer.sym.name} "
                        f"({'x'.join(str(self.consts.value(e)) for e in res.extents)}) without lying inside it, and one of "
                        "them is written, so the copies out would race",
                        s.launch.loc,
                        hint="launch the whole tile first (later tiles inside it become views into its buffer), "
                             "or make the tiles disjoint")

    def _within(self, view: fl.View, res: Optional[_Resident]) -> fl.View:
        """``view`` in the coordinates of ``res``'s buffer (dropped leading dimensions of one stay dropped)."""
        if res is None:
            return view
        shape = res.buffer.shape
        drop = len(view.extents) - len(shape)
        offsets = tuple(simplify(as_expr(difference(o, r, self.consts.values)))
                        for o, r in zip(view.offsets[drop:], res.offsets[drop:]))
        extents = view.extents[drop:]
        whole = all(o == Const(0) for o in offsets) and all(
            e == b or self._same_number(e, b) for e, b in zip(extents, shape))
        return fl.View(res.buffer.sym, offsets, shape if whole else extents, res.space, whole, view.origin)

    def _size(self, extents, name: str, loc) -> str:
        """A buffer's extents as numbers ("64x128"); a buffer cannot be sized by a dynamic dimension."""
        try:
            return "x".join(str(self.consts.value(e)) for e in extents)
        except DynamicValue:
            raise LoweringError(
                f"the buffer for {name} would be {' x '.join(map(str, extents))}: an extent depends on a dynamic "
                "dimension, and a buffer's size is fixed when the program compiles", loc,
                hint=f"keep {name} in global memory, tile that dimension by a tunable, or drop it from `dynamic`") from None

    def _same_number(self, a, b) -> bool:
        try:
            return self.consts.value(a) == self.consts.value(b)
        except DynamicValue:  # equal for every size only where it is one expression
            return False

    # copies and buffers -------------------------------------------------------------
    def _copy_options(self, inst, param: str):
        """The mapping's T.copy keywords for ``param``, and the memory its transfers go through (``via``)."""
        opts = inst.copy.get(param, {})
        return tuple((k, v.value) for k, v in opts.items() if k != "via"), opts.get("via")

    def _copies(self, src: fl.View, dst: fl.View, options, via, why: Why, param: str, shape, s: fl.Invoke) -> list:
        """One copy, or two through a buffer in the ``via`` memory (global memory's side takes the options)."""
        options = self._dtype_copy_options(src, dst, options)
        if not self.holds_exactly(src.of):  # (a copy of a copy that was rounded: rounded too)
            self.rounded.add(dst.of)
        if via is None:
            into = self.region(dst)
            if dst.whole and dst.of.name in self.clip:  # no reader reads past the in-bounds part: no zeros there
                into = dataclasses.replace(into, valid=self.clip[dst.of.name])
            return [ir.Copy(self.region(src), into, options, why)]
        mem = self.target.memories[via.value]
        outer = src if self.target.memories[src.space].is_global else dst
        sym = self.names.new(f"{param}_{mem.suffix}")
        buf_why = Why(f"{param} of {s.caller_task.name} passes through {via.value} ({s.caller.name}.copy.{param}.via)", mapping=via.loc)
        self._new_buffer(sym, shape, self._staged(self.dtypes[outer.of]), mem, buf_why, via.loc, holds=outer.of)
        mid = fl.View(sym, tuple(Const(0) for _ in shape), shape, via.value, True, src.origin)
        hop = Why(why.text + f", through {via.value}", mapping=via.loc, logic=why.logic)
        if outer is src:
            return [ir.Copy(self.region(src), self.region(mid), options, hop), ir.Copy(self.region(mid), self.region(dst), (), hop)]
        return [ir.Copy(self.region(src), self.region(mid), (), hop), ir.Copy(self.region(mid), self.region(dst), options, hop)]

    def _dtype_copy_options(self, src: fl.View, dst: fl.View, options: tuple) -> tuple:
        """The mapping's copy options, plus those the memories on either side need for the element type
        (target.yaml: copy_by_dtype)."""
        given = {k for k, _ in options}
        extra = {}
        for view in (src, dst):
            mem = self.target.memories.get(view.space)
            for k, v in (mem.copy_by_dtype.get(self.dtypes[view.of], {}) if mem is not None else {}).items():
                if k not in given:
                    extra[k] = v
        return options + tuple(sorted(extra.items()))

    def holds_exactly(self, sym) -> bool:
        """Whether an element read from tensor or buffer ``sym`` is what the program computed and stored there: its
        type holds a computed value whole and no copy into it came through a narrower one (task.recomputable)."""
        return recomputed.exact(self.dtypes[sym]) and sym not in self.rounded

    def _computed(self, dtype: str) -> str:
        """The type an on-chip buffer of ``dtype`` holds: the one the target computes it in (cpu: bfloat16 in
        float32), whether its tensor was converted by the runtime or kept as it is (keep_dtypes)."""
        return self.target.converts.get(dtype, dtype)

    def _staged(self, dtype: str) -> str:
        """The type an on-chip tile of a ``dtype`` tensor holds: the computed type, widened where the mapping's
        ``stage_dtypes`` says (cpu: float16 tiles in float32, converted by the vendor's copies)."""
        return self.ctx.mapping.staged_dtype(self._computed(dtype))

    def _new_buffer(self, sym, shape, dtype: str, mem, why: Why, loc, stages: int = 1, holds=None) -> ir.Buffer:
        self.dtypes[sym] = dtype
        self.shapes[sym] = tuple(shape)
        buf = ir.Buffer(sym, tuple(shape), dtype, mem.name, mem.alloc, why, stages=stages if mem.per_stage else 1,
                        holds=holds)
        self.buffers.append(buf)
        return buf

    def _overhangs(self, dim, ext) -> bool:
        """Whether a tile of ``ext`` may overhang ``dim``: a dynamic size may be any, so yes unless the tile is it."""
        try:
            return self.consts.value(dim) % max(self.consts.value(ext), 1) != 0
        except DynamicValue:
            return dim != ext

    def region(self, view: fl.View) -> ir.Region:
        full = self.shapes[view.of]
        valid = []
        for off, ext, dim in zip(view.offsets, view.extents, full):
            # A tile's offset is a multiple of its size: one that divides its dimension never overhangs. A
            # window's is any element: it overhangs where its offset's bounds let it pass the end.
            overhangs = not view.whole and (self._overhangs(dim, ext) or self._passes_end(off, ext, dim))
            valid.append(simplify(BinOp("min", ext, simplify(dim - off))) if overhangs else ext)
        dtype = self.dtypes[view.of]
        return ir.Region(view.of, view.offsets, view.extents, view.whole, tuple(valid),
                         full[-1] if len(full) > 1 else Const(1), dtype, self.target.dtype_codes.get(dtype))

    def _passes_end(self, off: Expr, ext: Expr, dim: Expr) -> bool:
        try:
            return bounds(off, self.env)[1] + self.consts.value(ext) > self.consts.value(dim)
        except (Unbounded, KeyError):  # offsets of tiles only (windows' are proven bounded), or a dynamic size
            return False


def _rebased(s: fl.Invoke, regions) -> fl.Invoke:
    """The inner task's invocation with its parameters where the staging put them."""
    ops = tuple(dataclasses.replace(op, view=r) for op, r in zip(s.operands, regions))
    return dataclasses.replace(s, operands=ops)


def _reduced_into(ctx: Context, task: TaskDef, param: str) -> bool:
    """Whether a primitive reduces into ``param`` anywhere below ``task`` (gemm's C += ...)."""
    for stmt, _ in walk(task.body):
        if isinstance(stmt, PrimCall):
            sig = stmt.signature
            if any(root_param(a).name == param and sig.privileges[k] is Privilege.REDUCE for k, a in enumerate(stmt.args)):
                return True
        elif isinstance(stmt, Launch):
            callee = ctx.graph.tasks[stmt.callee]
            if any(root_param(a).name == param and _reduced_into(ctx, callee, callee.params[k].name)
                   for k, a in enumerate(stmt.args)):
                return True
    return False
