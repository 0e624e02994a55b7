"""``combine: two_kernels``: a split reduction's programs write partial results, a second kernel adds them up.

The programs of grid index ``g`` all add into one tile of an output Y (``Y[ix] = Y[ix] + e``; see combine.py).
Here each program stores its ``e`` into its own slot of a workspace instead, ``Y_parts[g * Y_dim0 + ix0, ix1..]``
(Y's shape with the first dimension repeated once per index of g), and a second ``with T.Kernel`` over the
other grid indices adds the slots into Y in order of g:

    for p in T.serial(P):
        for j in T.Parallel(BN):
            if bx * BN + j < Y_dim0: Y[bx * BN + j] = Y[bx * BN + j] + Y_parts[p * Y_dim0 + bx * BN + j]

No atomics, and the sum's order is fixed (the same result on every run). TileLang launches the two kernels of
one program one after the other; the runtime allocates the workspace (the program's last parameter), zeros.
What this needs, else refused at the mapping's ``combine`` line: one output shared by the programs, added to by
one compute that is no loop's body (one slot per program), whose tile does not move with g; g a grid index of
its own (not folded) whose count is a number, as is Y's shape (the workspace is sized when the program is).
"""
from __future__ import annotations

import dataclasses

from septran.errors import MappingError
from septran.expr import BinOp, Const, Var
from septran.frontend import elementwise as el
from septran.lowering import overhang, tile_ir as ir
from septran.lowering.constants import Context, Names
from septran.lowering.linear import linear
from septran.lowering.writes import _regions


def two_kernels(ctx: Context, program: ir.TileProgram, shared: dict, entry, adding) -> ir.TileProgram:
    """``shared``: output -> grid index (writes.py); ``adding(stmt, names)``: the leaf's ``(Y[ix], e)`` (combine.py)."""
    loc = entry.combine.loc
    if not ctx.target.two_kernels:
        raise MappingError(f"{entry.name}.combine: two_kernels: target {ctx.target.name} runs one kernel per program",
                           loc, hint="leave combine out: there the programs that share an output add one after another")
    if not shared:  # at these sizes one program adds into each tile (one slice of the split dimension)
        return program
    if len(shared) > 1:
        raise MappingError(f"{entry.name}.combine: two_kernels: the programs add into {len(shared)} outputs "
                           f"({', '.join(sorted(shared))}); two kernels combine one", loc, hint="use combine: atomic")
    (out, gname), = shared.items()
    g, extent = next((s, e) for s, e in program.kernel.grid if s.name == gname)
    values = {c.sym: c.value for c in program.consts if c.value is not None}
    value = _number(values)
    param = next(p for p in program.params if p.sym.name == out)

    def refuse(what: str, hint: str = "use combine: atomic") -> MappingError:
        return MappingError(f"{entry.name}.combine: two_kernels: {what}", loc, hint=hint)

    if any(s == g and len(parts) > 1 for s, parts in program.kernel.folded):
        raise refuse(f"grid index {g.name} stands for several dimensions of the parallel_range")
    count, shape = value(extent), [value(e) for e in param.shape]
    if count is None or None in shape:
        raise refuse(f"the workspace's size ({extent} slots of {out}) is not a number (a dynamic dimension)")
    top = [k for k, s in enumerate(program.kernel.body) if not isinstance(s, ir.For) and _touches(s, out)]
    inside = any(_touches(s, out) for f in program.kernel.body if isinstance(f, ir.For) for s in ir.statements(f.body))
    if len(top) != 1 or inside:
        raise refuse(f"output {out} must be added to by one compute outside every loop (one slot per program)")
    k = top[0]
    s = program.kernel.body[k]
    store, e = adding(s, {out})
    name, region = s.args[0]
    if any(g in linear(off, values)[0] for off in region.offsets):
        raise refuse(f"the tile of {out} that a program adds into moves with grid index {g.name}")

    names = Names(program.names)
    parts, p = names.new(f"{out}_parts"), names.new("p")
    rows = param.shape[0]
    ws_shape = (BinOp("*", extent, rows),) + tuple(param.shape[1:])

    def slot(index, at) -> tuple:  # Y's element -> its slot in the workspace, for grid index value ``at``
        return (BinOp("+", BinOp("*", at, rows), index[0]),) + tuple(index[1:])

    guard = overhang.guard(region, store.index, param.shape)  # the loops run over whole tiles
    whole = dataclasses.replace(region, valid=())
    write = dataclasses.replace(
        s, args=((name, dataclasses.replace(whole, of=parts, offsets=slot(region.offsets, Var(g)))),) + s.args[1:],
        store=el.Elt(parts, slot(store.index, Var(g))), expr=e, guard=s.guard + guard,
        why=dataclasses.replace(s.why, text=f"{s.why.text}; into slot {g.name} of {parts.name} (combine: two_kernels)",
                                mapping=loc))
    add = ir.LeafCall(s.impl, s.template, ((name, whole),),
                      ir.Why(f"adds slot {p.name} of {parts.name} into {out} (combine: two_kernels)", loc),
                      store=store, expr=el.Bin("+", store, el.Elt(parts, slot(store.index, Var(p)))),
                      loop=s.loop, guard=s.guard + guard)
    grid = tuple((sym, x) for sym, x in program.kernel.grid if sym != g) or ((names.new("bx"), Const(1)),)
    second = ir.KernelLaunch(
        grid, program.kernel.threads, (),
        (ir.For(p, extent, "serial", None, (add,), ir.Why(f"the {count} slots of {parts.name}, in order", loc)),),
        ir.Why(f"the second kernel: {out} += the sum of {parts.name}'s slots, one tile of {out} per program", loc),
        tuple(f for f in program.kernel.folded if f[0] != g))
    body = program.kernel.body[:k] + (write,) + program.kernel.body[k + 1:]
    return dataclasses.replace(
        program, kernel=dataclasses.replace(program.kernel, body=body), after=program.after + (second,),
        params=program.params + (ir.TensorParam(parts, ws_shape, param.dtype, "workspace"),),
        workspaces=program.workspaces + ((parts.name, (count * shape[0],) + tuple(shape[1:]), param.dtype),),
        names=frozenset(names.used))


def _number(values):
    def value(e):
        terms, const = linear(e, values)
        return None if terms else const
    return value


def _touches(s, out: str) -> bool:
    return any(r.of.name == out for _, r in _regions(s))
