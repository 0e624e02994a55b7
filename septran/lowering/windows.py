"""Windows in the flat program: their views (``flatten``) and the proof that they stay in bounds (``verify``).

A window's index is where it starts, in elements of the view it is cut from,
so its view's offset is the base's plus the start (a tile's is the base's plus
index x tile). Each start is kept as a ``WindowUse`` with the extent it may
not leave:

* a window cut from a whole dimension of a tensor may run past the tensor's
  end (copies and in-place reads are guarded there, as a tile's are: the
  staging computes each region's in-bounds part from the offsets' bounds),
  but must start inside it: 0 <= start <= extent - 1;
* a window cut from a tile, or from a temp, must lie inside it:
  0 <= start and start + window <= extent (the tile's neighbours are not its).
"""
from __future__ import annotations

from dataclasses import dataclass

from septran.errors import LoweringError, SourceLoc
from septran.expr import Const, Expr, simplify
from septran.frontend.ir import TileRef, root_param
from septran.lowering import flat_ir as fl
from septran.lowering.intervals import Unbounded, bounds, witness


@dataclass(frozen=True)
class WindowUse:
    """One start of a window: ``start .. start + extent - 1`` must stay as the module says in ``0 .. limit - 1``."""

    start: Expr  # in the program's loop variables and constants
    extent: Expr  # the window's extent along this axis
    limit: Expr  # the extent of what the window is cut from
    may_overhang: bool  # cut from a whole dimension of a tensor: may run past its end
    axis: int
    partition: str
    source: str
    written: str
    loc: SourceLoc

    def describe(self) -> str:
        rule = f"start in 0..{self.limit} - 1" if self.may_overhang else f"start + {self.extent} <= {self.limit}"
        return f"window start {self.written} = {self.start}, {rule} ({self.partition} axis {self.axis})"


def region(flattener, arg: TileRef, base, task, views, loops, uses: list):
    """The view of window ``arg`` of ``base``; appends one ``WindowUse`` per dimension it does not span."""
    part = arg.partition
    tensors = flattener.tensor_syms
    offsets, extents, origin = [], [], []
    for axis, (start, shape) in enumerate(zip(arg.index, part.tile)):
        if arg.is_whole(axis):
            offsets.append(base.offsets[axis])
            extents.append(base.extents[axis])
            origin.append(base.origin[axis])
            continue
        s = flattener._subst(start, task, views, loops, arg.loc)
        t = flattener._subst(shape, task, views, loops, part.loc)
        # The whole extent of a tensor: the base starts at 0 and spans what its origin says the tensor has.
        whole = base.of in tensors and base.offsets[axis] == Const(0) and base.extents[axis] == base.origin[axis][1]
        uses.append(WindowUse(s, t, base.extents[axis], whole, axis, part.sym.name, root_param(part.source).name,
                              str(start), arg.loc))
        offsets.append(simplify(base.offsets[axis] + s))
        extents.append(t)
        origin.append((simplify(base.origin[axis][0] + s), base.origin[axis][1]))
    return fl.View(base.of, tuple(offsets), tuple(extents), base.space, False, tuple(origin))


def check(u: WindowUse, env, value) -> None:
    """Refuses a window that may start before 0, or leave what it is cut from (see the module's rules)."""
    try:
        lo, hi = bounds(u.start, env)
        limit = bounds(u.limit, env)[0]
    except Unbounded as err:
        raise LoweringError(f"cannot prove window {u.partition}'s start {u.written} in bounds: {err}", u.loc,
                            hint="write starts as sums and products of loop variables, shapes, offsets and tunables") from None
    extent = value(u.extent)
    varying = {s: r for s, r in env.items() if isinstance(r, tuple) and r[0] != r[1]}  # (not the trip counts)

    def at(v: int) -> str:
        w = witness(u.start, varying, v)
        return f" (at {', '.join(f'{k} = {x}' for k, x in w.items())})" if w else ""

    if lo < 0:
        raise LoweringError(
            f"{u.partition}: window start {u.written} reaches {lo}{at(lo)}, before the start of {u.source} along "
            f"dimension {u.axis}", u.loc,
            hint="windows start at 0 or after; for a padded convolution, pad the input first (torch.nn.functional.pad)")
    if u.may_overhang and hi > limit - 1:
        raise LoweringError(
            f"{u.partition}: window start {u.written} reaches {hi}{at(hi)}, but {u.source} has {limit} elements along "
            f"dimension {u.axis}: the window would lie wholly past its end", u.loc,
            hint="start every window inside the tensor (it may run past the end; those elements read as 0)")
    if not u.may_overhang and hi + extent > limit:
        raise LoweringError(
            f"{u.partition}: the window of {extent} elements starting at {u.written} reaches element {hi + extent - 1}"
            f"{at(hi)}, but it is cut from a tile of {limit} elements along dimension {u.axis} of {u.source}",
            u.loc, hint="keep a window of a tile inside the tile (start + size <= the tile's size), or cut it from the "
                        "whole tensor (pass the tensor, not a tile of it)")


def refuse_written_at_grid(args, operands) -> None:
    """Windows may overlap: programs of the grid that write windows of one tensor would race."""
    for arg, op in zip(args, operands):
        a = arg
        while isinstance(a, TileRef):
            if a.partition.by == "windows" and op.privilege.writes:
                raise LoweringError(f"the grid's programs would write windows of {op.param}, and windows may overlap",
                                    a.loc, hint=f"hand each program a tile of {op.param} (task.partition) and write "
                                                "windows of it inside the program")
            a = a.partition.source
