"""Pass: combine. Programs of the grid that add into the same output element (a split reduction: each
program sums its slice of the reduced axis into one tile of Y, ``Y[j] = Y[j] + acc[j]``).

``writes`` finds which grid indices separate the programs' output boxes; an output the program reads before
it writes (an accumulator, zero-filled by the runtime) and that some grid index does not separate is shared
(``TileProgram.shared_outputs``).
What happens to it is the mapping's choice, on the entry instance:

- nothing said: the programs add one after another where the target runs the grid itself (``writes`` kept
  that index sequential); where the target runs every program at once (a GPU's blocks) that is a race, refused.
- ``combine: atomic``: every store into the shared output must be ``Y[..] = Y[..] + e`` with Y addressed in
  GLOBAL memory; it becomes ``T.atomic_add(Y[..], e)``, on targets that have it (``atomic_add: true``).

- ``combine: two_kernels``: the programs store their partial results into a workspace, one slot per program,
  and a second kernel adds the slots into Y (two_kernels.py).
"""
from __future__ import annotations

import dataclasses

from septran.errors import LoweringError, MappingError
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context
from septran.lowering.overhang import whole_tile
from septran.lowering.two_kernels import two_kernels
from septran.lowering.writes import _regions


def combine(ctx: Context, program: ir.TileProgram) -> ir.TileProgram:
    entry = ctx.mapping.instance(ctx.mapping.entrypoint.value)
    for inst in ctx.mapping.instances.values():
        if inst.combine is not None and inst is not entry:
            raise MappingError(f"{inst.name}.combine: combine belongs on the entry instance "
                               f"{entry.name}, whose parallel_range makes the grid", inst.combine.loc)
    shared = dict(program.shared_outputs)  # the writes pass found them
    if entry.combine is None:
        if shared and not ctx.target.procs[entry.proc.value].schedules:
            out, g = next(iter(shared.items()))
            raise LoweringError(
                f"the programs of grid index {g} all add into output {out}: on {ctx.target.name} they run at once, "
                "and their additions would race", entry.loc,
                hint=f"say how they combine on {entry.name}: `combine: atomic` (atomic adds into {out}), or "
                     "`combine: two_kernels` (partial sums into a workspace, then a second kernel adds them up)")
        return program
    if entry.combine.value == "two_kernels":
        return two_kernels(ctx, program, shared, entry, lambda s, names: _adding(s, names, entry))
    if not ctx.target.atomic_add:
        raise MappingError(f"{entry.name}.combine: atomic: target {ctx.target.name} has no atomic add", entry.combine.loc,
                           hint="leave combine out: there the programs that share an output add one after another")
    return dataclasses.replace(program, kernel=dataclasses.replace(
        program.kernel, body=_atomic(program.kernel.body, set(shared), entry, {p.sym: p.shape for p in program.params})))


def _atomic(stmts, shared: set, entry, shapes):
    body = []
    for s in stmts:
        if isinstance(s, ir.For):
            body.append(dataclasses.replace(s, body=tuple(_atomic(s.body, shared, entry, shapes))))
            continue
        names = {r.of.name for _, r in _regions(s)} & shared
        if names:
            s = _atomic_leaf(s, names, entry)
            s = whole_tile(s, shapes[s.store.of])
        body.append(s)
    return tuple(body)


def _atomic_leaf(s, names, entry):
    """``Y[ix] = Y[ix] + e`` (or ``e + Y[ix]``) into Y in GLOBAL memory -> the same leaf, adding e atomically."""
    _, rest = _adding(s, names, entry)
    return dataclasses.replace(s, expr=rest, atomic=True)


def _adding(s, names, entry):
    """(``Y[ix]``, ``e``) of a leaf ``Y[ix] = Y[ix] + e`` (or ``e + Y[ix]``) into Y in GLOBAL memory."""
    out = sorted(names)[0]
    refuse = MappingError(
        f"{entry.name}.combine: {entry.combine.value}: output {out} must be added to by one compute, {out}[...] = {out}[...] + e, "
        f"that addresses {out} in GLOBAL memory; not so in {s.why}",
        entry.combine.loc, hint=f"map {out} to GLOBAL in the instance whose leaf adds into it (mems: {{{out}: GLOBAL}})")
    if not isinstance(s, ir.LeafCall) or s.expr is None or s.store is None or s.store.of.name != out:
        raise refuse
    e = s.expr
    if not (isinstance(e, el.Bin) and e.op == "+"):
        raise refuse
    for own, rest in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if _same_element(own, s.store) and not any(isinstance(n, el.Elt) and n.of == s.store.of for n in el.nodes(rest)):
            return s.store, rest
    raise refuse


def _same_element(a, store) -> bool:
    """``a`` reads the stored element (guarded where the tile overhangs its tensor: the guard reads it there)."""
    if isinstance(a, el.Call) and a.fn == "where" and len(a.args) == 3:
        a = a.args[1]
    return isinstance(a, el.Elt) and a.of == store.of and tuple(map(str, a.index)) == tuple(map(str, store.index))

