"""Pass: writes. Which parts of its outputs each program touches: whether the grid's programs may run at
once, and which outputs the program reads before it writes them.

Programs may run on several threads only where two of them never touch the
same element of an output: for every grid index that runs in parallel, every
region of an output is offset along some dimension by that index times at
least the region's extent, and by nothing else that varies (``C[by * BM, bx *
BN]`` with BM x BN tiles). Grid indices that fail stay sequential, with every
index inside them (C runs the grid as loops, the first index outermost).

An output the program only writes (copies out, stores) needs no initial
value; one it also reads (an accumulator in global memory, ``C += ...`` in
place) starts from zeros, which the runtime provides.
"""
from __future__ import annotations

import dataclasses
import logging
import math

from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context
from septran.lowering.linear import linear

log = logging.getLogger(__name__)


def writes(ctx: Context, program: ir.TileProgram, value) -> ir.TileProgram:
    """``value``: an integer expression's value (the program's constants are numbers)."""
    outputs = {t.sym for t in program.params if t.role != "input"}
    grid = [sym for sym, _ in program.kernel.grid]
    touched, read = [], set()
    for stmt in _statements(program.kernel.body):
        for role, region in _regions(stmt):
            if region.of in outputs:
                touched.append(region)
                if role != "written":
                    read.add(region.of)
    values = {c.sym: c.value for c in program.consts if c.value is not None}
    spans = _spans(program.kernel.body, value)
    parallel = 0
    folded = dict(program.kernel.folded)
    for g in grid:  # the longest run of grid indices, outermost first, that no two programs share
        # A grid index that stands for several dimensions (grid_fold.py) is shared by none when each of them is not.
        if not all(_separates(r, part, values, value, spans) for r in touched for part in folded.get(g, (g,))):
            log.debug("%s: grid index %s is not parallel: two of its programs may touch one output element", program.name, g.name)
            break
        parallel += 1
    extents = [(sym, _count(extent, value)) for sym, extent in program.kernel.grid[:parallel]]
    schedule = _schedule(ctx) if math.prod(n for _, n in extents) > 1 else None  # one program: threads only cost
    # TileLang prints no loop for an index of extent 1, so only the others are named.
    par = ir.ParallelGrid(tuple(sym for sym, n in extents if n > 1), schedule) if schedule else None
    # An output read (accumulated into) by programs that one grid index does not keep apart: a split reduction.
    shared: dict = {}
    for sym, extent in program.kernel.grid:
        if _count(extent, value) > 1:
            for r in (r for r in touched if r.of in read and r.of.name not in shared):
                if not all(_separates(r, part, values, value, spans) for part in folded.get(sym, (sym,))):
                    shared[r.of.name] = sym.name
    return dataclasses.replace(program, parallel=par, shared_outputs=tuple(shared.items()),
                               read_outputs=frozenset(t.sym.name for t in program.params if t.sym in read))


def _count(extent, value) -> int:
    """A grid extent's number; one that grows with a dynamic dimension counts as many (TileLang loops over it)."""
    try:
        return value(extent)
    except KeyError:
        return 2


def _schedule(ctx: Context):
    """The entry instance's ``schedule``, else its processor's first; None where the grid does not run in parallel."""
    inst = ctx.mapping.instance(ctx.mapping.entrypoint.value)
    proc = ctx.target.procs[inst.proc.value]
    if not proc.schedules:
        return None
    return inst.schedule.value if inst.schedule is not None else proc.schedules[0]


def _separates(r: ir.Region, g, values, value, spans) -> bool:
    """Whether programs that differ in grid index ``g`` touch disjoint boxes of ``r``'s tensor: along some
    dimension, a step of g moves the box further than the box and the loops inside the program reach."""
    for off, ext in zip(r.offsets, r.extents):
        terms, _ = linear(off, values)
        if g not in terms or any(t != g and t not in spans for t in terms):
            continue
        try:
            reach = sum(abs(c) * spans[t] for t, c in terms.items() if t != g)  # g: a grid index, or a part of one
            if abs(terms[g]) >= value(ext) + reach:
                return True
        except KeyError:  # an extent with no number (a dynamic dimension): not proven apart
            continue
    return False


def _spans(stmts, value, out=None) -> dict:
    """Each loop variable's largest value, where the loop's extent is a number (not one that varies by block)."""
    out = {} if out is None else out
    for s in stmts:
        if isinstance(s, ir.For):
            try:
                out[s.var] = value(s.extent) - 1
            except KeyError:
                pass
            _spans(s.body, value, out)
    return out


def _statements(stmts):
    for s in stmts:
        if isinstance(s, ir.For):
            yield from _statements(s.body)
        else:
            yield s


def _regions(stmt):
    """(how, region) for each tensor region a statement names: "written" only where it is a copy's or store's target."""
    if isinstance(stmt, ir.Copy):
        yield "read", stmt.src
        yield "written", stmt.dst
    elif isinstance(stmt, ir.VendorOp):
        for name, r in stmt.args:
            yield ("written" if stmt.op == "store" and name == "dst" else "read"), r
    elif isinstance(stmt, ir.LeafCall):
        # Elementwise code stores into its first operand; unless the expression reads that tensor too, the
        # store only writes it. Any other leaf (a gemm's C +=) may read every operand.
        stored = stmt.store.of if stmt.store is not None else None
        reads_stored = stored is not None and any(isinstance(e, el.Elt) and e.of == stored for e in el.nodes(stmt.expr))
        for k, (_, r) in enumerate(stmt.args):
            yield ("written" if k == 0 and r.of == stored and not reads_stored else "read"), r
