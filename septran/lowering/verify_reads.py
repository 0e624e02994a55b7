"""Part of the verify pass: every element a ``task.compute`` reads lies in its operand's tile.

Plain reads at tied indices (``X[i, j]`` where every read of X there is plain
and unguarded) are proved by the index ties (``verify._letters``). Here the
others: a plain read of a dimension that ties nothing (read elsewhere at an
offset, or under a guard: ``frontend/compute_operands``), a shifted or constant
read (``X[i, j + 1]``, ``X[i, half + j]``, ``s[0]``) ranges over the compute's
loop extents, its offset over what the block may be; the range must lie in
``0 .. extent - 1`` of the tile. A read
inside ``task.where(task.global_index(X, 1, j) < n, a, b)`` is proved with
``j`` narrowed by the condition (in ``a``: only the ``j`` where it holds), so a
stencil can guard its edges. A gathered read (``X[i, T[i]]``) proves nothing
about its index: its dimension must be a whole dimension of the tensor, and
the lowering guards it (``index_reads``). A tile a memory spreads over threads
(``own_index_only`` in target.yaml: TileLang's fragments) is read only at the
compute's own indices.

A halo (the mapping's ``halo: {X: [0, 1]}`` on the instance that launches the
leaf) widens the range a read may take: ``-before .. extent - 1 + after``
along each dimension. The staging copies the widened box (0 past the
tensor's ends); a tile read in place in global memory is read in the tensor,
guarded against its ends (``leaf_calls``).
"""
from __future__ import annotations

from septran.errors import LoweringError, MappingError
from septran.expr import BinOp, Const, Dim, GlobalExtent, GlobalStart, leaves, substitute
from septran.frontend import elementwise as el
from septran.frontend.compute_operands import shifted
from septran.frontend.guards import guard
from septran.frontend.index_expr import Gather, describe
from septran.frontend.ir import PrimCall, walk
from septran.lowering import flat_ir as fl
from septran.lowering.dynamic import DynamicValue
from septran.lowering.intervals import Unbounded, bounds


def check_program(ctx, consts, s: fl.Invoke, env) -> None:
    """Walks the flat program (loop variables ranging as the verify pass found) to each leaf's computes."""
    if s.binding is not None:
        _leaf(ctx, consts, s, env)
        return
    for b in s.body:
        _stmt(ctx, consts, b, env)


def _stmt(ctx, consts, b, env) -> None:
    if isinstance(b, fl.Invoke):
        check_program(ctx, consts, b, env)
        return
    try:
        hi = bounds(b.extent, env)[1]
    except Unbounded:
        return  # the verify pass reports it
    if hi > 0:
        inner = dict(env)
        inner[b.var] = (0, hi - 1)
        for c in b.body:
            _stmt(ctx, consts, c, inner)


def _leaf(ctx, consts, s: fl.Invoke, env) -> None:
    leaf = s.callee
    views = {p.sym: (p, s.operands[k]) for k, p in enumerate(leaf.params)}
    halos = _halos(s)
    for prim in (p for p, _ in walk(leaf.body) if isinstance(p, PrimCall) and p.expr is not None):
        names = prim.signature.dims[0]
        out_extents = views[prim.args[0].sym][1].view.extents
        if len(out_extents) < len(names):
            continue  # the leaf binding reports the rank
        ranges = {}
        for n, e in zip(names, out_extents[len(out_extents) - len(names):]):
            ranges[n] = (0, consts.range(e)[1] - 1)  # a dynamic extent: up to its largest size
        if any(hi < lo for lo, hi in ranges.values()):
            continue  # an empty loop reads nothing
        own = dict(zip(names, out_extents[len(out_extents) - len(names):]))
        _Reads(ctx, consts, env, views, prim, halos, own).walk(prim.expr, ranges)


class _Reads:
    def __init__(self, ctx, consts, env, views, prim, halos, own):
        self.ctx, self.consts, self.env, self.views, self.prim = ctx, consts, env, views, prim
        self.halos = halos
        self.own = own  # the compute's index -> the output tile's extent there

    def program_expr(self, e):
        """A shape expression of the logic in the program's terms (tile extents, tile starts)."""
        sub = {}
        for leaf in leaves(e):
            if isinstance(leaf, (Dim, GlobalExtent, GlobalStart)) and leaf.param in self.views:
                view = self.views[leaf.param][1].view
                if leaf.axis < len(view.extents):
                    sub[leaf] = (view.extents[leaf.axis] if isinstance(leaf, Dim)
                                 else view.origin[leaf.axis][1 if isinstance(leaf, GlobalExtent) else 0])
        return substitute(e, sub)

    def interval(self, e, what: str):
        try:
            return bounds(self.program_expr(e), self.env)
        except Unbounded as err:
            raise LoweringError(f"cannot prove {what} in its tile: {err}", self.prim.loc,
                                hint="offset reads by numbers and shapes (X.shape[1] // 2)") from None

    def walk(self, e: el.Elem, ranges) -> None:
        if isinstance(e, el.Call) and e.fn == "where":
            self.walk(e.args[0], ranges)
            yes, no = self.narrow(e.args[0], ranges)
            if yes is not None:
                self.walk(e.args[1], yes)
            if no is not None:
                self.walk(e.args[2], no)
            return
        if isinstance(e, el.Load):
            self.load(e, ranges)
        for c in el.children(e):
            self.walk(c, ranges)

    def narrow(self, cond, ranges):
        """(ranges where ``cond`` holds, where it does not); None: never. Only ``global_index(X, a, j) <op> n``
        (``frontend/guards``: the frontend unties a plain read inside such a guard, trusting this narrowing)."""
        found = guard(cond)
        if found is None or found[1].idx not in ranges:
            return ranges, ranges
        op, pos, other = found
        bound = other.expr if isinstance(other, el.IntExpr) else Const(int(other.value))
        view = self.views[pos.arg.sym][1].view
        if pos.axis >= len(view.origin):
            return ranges, ranges
        # start + j <op> bound  <=>  j <op> bound - start
        lo, hi = self.interval(BinOp("-", self.program_expr(bound), view.origin[pos.axis][0]), "a condition")
        yes_lo, yes_hi, no_lo, no_hi = {
            "<": (None, hi - 1, lo, None), "<=": (None, hi, lo + 1, None),
            ">": (lo + 1, None, None, hi), ">=": (lo, None, None, hi - 1)}[op]
        return _cut(ranges, pos.idx, yes_lo, yes_hi), _cut(ranges, pos.idx, no_lo, no_hi)

    def load(self, load: el.Load, ranges) -> None:
        param, op = self.views[load.arg.sym]
        view, prim = op.view, self.prim
        letters = prim.signature.dims[prim.args.index(load.arg)]
        if load.arg == prim.args[0] or not (shifted(load) or any(isinstance(i, str) and i != x for i, x in zip(load.idx, letters))):
            return  # reads at one set of plain indices: the index ties prove them
        extents = view.extents
        pad = len(extents) - len(load.idx)
        if pad < 0:
            raise LoweringError(f"{_shown(load)} reads {param.name} with {len(load.idx)} indices, but its tile has "
                                f"{len(extents)} dimensions", prim.loc)
        space = op.want.value if op.want is not None else view.space
        if getattr(self.ctx.target.memories.get(space), "own_index_only", False) and not self.at_own(load, extents):
            raise LoweringError(
                f"{_shown(load)} reads {param.name} away from the compute's own indices, but the mapping holds "
                f"{op.param} in {space}, which {self.ctx.target.name} spreads over the threads: a thread can read only "
                f"the elements it holds (logic {prim.loc})",
                op.want.loc if op.want is not None else prim.loc,
                hint=f"hold {op.param} in a memory every thread reads (mems: {{{op.param}: SHARED}}, or GLOBAL)")
        halo = self.halos.get(op.param)
        for axis, entry in enumerate(load.idx):
            if isinstance(entry, str) and self.own.get(entry) == extents[pad + axis]:
                continue  # a plain read of a tile as long as the output's there (a dynamic size included)
            ext = self.consts.value(extents[pad + axis])
            before, after = halo.pairs[pad + axis] if halo is not None else (0, 0)
            if isinstance(entry, Gather):
                self.whole(load, param, op, pad + axis, ext)
                continue
            if isinstance(entry, str):
                lo, hi = ranges[entry]
            else:
                olo, ohi = self.interval(entry.offset, f"{_shown(load)}")
                if entry.name is None:
                    lo, hi = olo, ohi
                else:
                    rlo, rhi = ranges[entry.name]
                    ends = (entry.scale * rlo, entry.scale * rhi)
                    lo, hi = min(ends) + olo, max(ends) + ohi
            if lo < -before or hi > ext - 1 + after:
                name = entry if isinstance(entry, str) else entry.name
                runs = f" ({name} runs over {ranges[name][0]}..{ranges[name][1]})" if name else ""
                held = (f"{ext} element{'s' if ext != 1 else ''} there (0..{ext - 1})" if not (before or after) else
                        f"{ext} elements there and a halo of {before} before and {after} after "
                        f"({-before}..{ext - 1 + after})")
                past = hi - (ext - 1 + after)
                narrower = (f"; or, for a valid-mode result, pass a narrower output ({past} fewer along {name}: "
                            "nothing ties its extent to this read)") if name and past > 0 else ""
                raise LoweringError(
                    f"{_shown(load)} reads {param.name} at {lo}..{hi} along dimension {pad + axis}{runs}, but the tile of "
                    f"{op.param} holds {held}", prim.loc,
                    hint="make the tile cover every element the compute reads (the whole dimension: None in the "
                         "partition, or a larger tile in the mapping), stage a halo around it (the mapping's "
                         f"`halo: {{{op.param}: [...]}}` next to mems), keep the offset inside the tile, or guard the "
                         "read with task.where(task.global_index(X, axis, j) < ..., ...)" + narrower)

    def at_own(self, load: el.Load, extents) -> bool:
        """A plain read whose tile is as large as the output's along each index: the compute's own elements."""
        if shifted(load):
            return False
        for entry, extent in zip(load.idx, extents[len(extents) - len(load.idx):]):
            mine = self.own.get(entry)
            if mine is None:
                return False
            if mine != extent:
                try:
                    if self.consts.value(mine) != self.consts.value(extent):
                        return False
                except DynamicValue:
                    return False
        return True

    def whole(self, load, param, op, axis: int, ext: int) -> None:
        view = op.view
        start, total = view.origin[axis] if axis < len(view.origin) else (None, None)
        lo, hi = bounds(start, self.env) if start is not None else (None, None)
        n = self.consts.value(total) if total is not None else None
        if not (lo == hi == 0 and n == ext):
            raise LoweringError(
                f"{_shown(load)} gathers {param.name} along dimension {axis}: a gathered index may name any element "
                f"there, but the tile of {op.param} holds {ext} of its {n if n is not None else '?'} elements",
                self.prim.loc,
                hint="make the tile cover the whole dimension (None in the partition that cuts it); an index "
                     "outside the dimension reads 0")


def _halos(s: fl.Invoke) -> dict:
    """The calling instance's halos, checked against the leaf's operands: their ranks, and read only."""
    halos = dict(s.caller.halo)
    for op in s.operands:
        halo = halos.get(op.param)
        if halo is None:
            continue
        if len(halo.pairs) != len(op.view.extents):
            raise MappingError(f"{s.caller.name}.halo.{op.param} has {len(halo.pairs)} entries, but the tile of "
                               f"{op.param} has {len(op.view.extents)} dimensions", halo.loc,
                               hint="give one entry per dimension (0 where the tile needs no halo)")
        if op.privilege.writes:
            raise MappingError(f"{s.caller.name}.halo.{op.param}: {s.callee.name} writes {op.param} "
                               f"({op.privilege.value}), and a halo is only read", halo.loc,
                               hint=f"delete the halo of {op.param}, or read a copy of it")
    return halos


def _cut(ranges, name, lo, hi):
    a, b = ranges[name]
    a, b = max(a, lo) if lo is not None else a, min(b, hi) if hi is not None else b
    if a > b:
        return None
    out = dict(ranges)
    out[name] = (a, b)
    return out


def _shown(load: el.Load) -> str:
    return f"{load.arg.name}[{', '.join(describe(i, lambda v: el.describe(v, lambda a: a.name)) for i in load.idx)}]"
