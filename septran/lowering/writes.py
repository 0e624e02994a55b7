"""Pass: writes. Which parts of its outputs each program touches: whether the grid's programs may run at
once, and which outputs the program reads before it writes them.

Programs may run on several threads only where two of them never touch the
same element of an output: for every grid index that runs in parallel, every
region of an output is offset along some dimension by that index times at
least the region's extent, and by nothing else that varies (``C[by * BM, bx *
BN]`` with BM x BN tiles). Grid indices that fail stay sequential, with every
index inside them (C runs the grid as loops, the first index outermost).

An output the program only writes (copies out, stores) needs no initial
value; one it reads before writing (an accumulator in global memory, ``C +=
...`` in place) starts from zeros, which the runtime provides. A read of a
region the program wrote whole before it, in program order, reads no initial
value: softmax's Y, written with the exps and then scaled in place, needs no
zeros (a memset of the whole output at every call). "Before" is the same loop
iteration, or an earlier loop over the same extent whose variable stands where
the reading loop's does.
"""
from __future__ import annotations

import dataclasses
import logging
import math

from septran.expr import Var, substitute
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context
from septran.lowering.linear import linear

log = logging.getLogger(__name__)


def writes(ctx: Context, program: ir.TileProgram, value) -> ir.TileProgram:
    """``value``: an integer expression's value (the program's constants are numbers)."""
    outputs = {t.sym for t in program.params if t.role != "input"}
    grid = [sym for sym, _ in program.kernel.grid]
    touched = [region for stmt in ir.statements(program.kernel.body) for role, region in _regions(stmt)
               if region.of in outputs]
    read = _read_first(program.kernel.body, outputs, [], (), set())
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


def _read_first(stmts, outputs, written: list, loops: tuple, read: set) -> set:
    """The outputs some statement reads where no earlier statement wrote that region whole (see the module's
    docstring). ``written``: (region, loop variable, extent) of each whole write so far, the variable that of a
    finished loop the region was written in (None: written in the current iteration); ``loops``: the enclosing
    loops' (variable, extent)."""
    for s in stmts:
        if isinstance(s, ir.For):
            # the body sees what was written before the loop; its own writes count only inside one iteration
            _read_first(s.body, outputs, list(written), loops + ((s.var, s.extent),), read)
            # What the loop wrote in every iteration it wrote for every value of its variable.
            for stmt in ir.statements(s.body):
                for role, r in _regions(stmt):
                    if role == "written" and r.of in outputs and _whole_write(stmt):
                        written.append((r, s.var, s.extent))
            continue
        for role, r in _regions(s):
            if r.of not in outputs:
                continue
            if role == "written":
                if _whole_write(s):
                    written.append((r, None, None))
            elif not any(_covers(w, var, extent, r, loops) for w, var, extent in written):
                read.add(r.of)
    return read


def _whole_write(stmt) -> bool:
    """A statement that writes every element of its target region (a guarded store writes part of it)."""
    return not (isinstance(stmt, ir.LeafCall) and (stmt.guard or stmt.atomic))


def _covers(w: ir.Region, var, extent, r: ir.Region, loops: tuple) -> bool:
    """Whether write ``w`` (in a finished loop over ``var`` of ``extent``, or in this iteration: var None) wrote
    every element that read ``r`` may read."""
    def same(a: ir.Region) -> bool:
        return (a.of, a.offsets, a.extents, a.valid) == (r.of, r.offsets, r.extents, r.valid)
    if var is None:
        return same(w)
    for u, e in loops:  # the reading loop over the same range stands where the writing loop's variable did
        if e == extent:
            env = {Var(var): Var(u)}
            moved = dataclasses.replace(w, offsets=tuple(substitute(o, env) for o in w.offsets),
                                        extents=tuple(substitute(x, env) for x in w.extents),
                                        valid=tuple(substitute(x, env) for x in w.valid))
            if same(moved):
                return True
    return False  # (a loop may run no iteration: a region it wrote whatever its variable is counts only as above)


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
        # store only writes it. A compute's form (compute_forms.py) says which operands it only writes. Any other
        # leaf (a gemm's C +=) may read every operand.
        stored = stmt.store.of if stmt.store is not None else None
        reads_stored = stored is not None and any(isinstance(e, el.Elt) and e.of == stored for e in el.nodes(stmt.expr))
        for k, (_, r) in enumerate(stmt.args):
            only_written = k in stmt.written or (k == 0 and r.of == stored and not reads_stored)
            yield ("written" if only_written else "read"), r
