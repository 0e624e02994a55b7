"""A program in two versions: one for the sizes at which its walks over a dynamic size run once.

Why: single_trips.py drops a loop that runs once, so a row operator stages its row once for all its passes. A
dynamic size (softmax's columns at the model level, which grow by one at each decode step) leaves every walk
over it a loop, and each walk stages a tile of its own: the row is read and widened once per pass, and a staged
output is stored after one pass and loaded again for the next (float16 and bfloat16 softmax at the model level
ran at 0.65x to 0.8x torch on the CPU, where the same rows of a size the program knows ran at 1.2x).

Here, on targets that ask (``one_tile_versions`` in target.yaml: each version's buffers are allocated, which a
CPU's stack affords and a GPU's shared memory would not), a program whose serial walks count
``ceildiv(n, BN)`` tiles of one dynamic size ``n`` (every such walk over the same ``n`` and ``BN``) is lowered
a second time with ``n`` at most ``BN``: those walks then run once and single_trips.py drops them. The program
runs that version under ``if 1 <= n <= BN`` and the general one otherwise (a size of 0 keeps its walks of no
trip), so no call depends on which size it came with. Both versions come from one verified flat program: the
walks' index 0 is a value verify proved for every size, and where 1 <= n <= BN it is the only one. Where the two
versions cannot share one kernel (other grids, parameters, workspaces, kernels after, or a buffer name taken
twice), or the one-tile version copies no fewer tiles (attention's K and V read where they lie: its walks would
only lose their loop), the program stays as it was.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from septran.errors import SepTranError
from septran.expr import BinOp, Sym, Var
from septran.lowering import flat_ir as fl, tile_ir as ir
from septran.lowering.constants import Constants


def one_tile_size(consts: Constants, flat: fl.FlatProgram) -> Optional[tuple[Sym, int]]:
    """The dynamic size and tile whose bound makes the program's serial walks run once; None: no such walk, or
    walks over more than one (size, tile)."""
    found: set = set()

    def visit(stmts) -> None:
        for s in stmts:
            if isinstance(s, fl.Loop):
                e = s.extent
                if (s.stages is None and not s.parallel and isinstance(e, BinOp) and e.op == "ceildiv"
                        and isinstance(e.lhs, Var) and e.lhs.sym in consts.dynamic):
                    tile = consts.known(e.rhs)
                    if tile is not None and tile > 0:
                        found.add((e.lhs.sym, tile))
                visit(s.body)
            else:
                visit(s.body)

    visit(flat.program.body)
    return next(iter(found)) if len(found) == 1 else None


def merge(general: ir.TileProgram, small: ir.TileProgram, size: Sym, tile: int,
          check: Callable[[ir.TileProgram], ir.TileProgram]) -> ir.TileProgram:
    """One program running ``small``'s body where ``1 <= size <= tile`` and ``general``'s otherwise (``check``: the
    capacity pass, on both versions' buffers); ``general`` where they cannot share a kernel."""
    g, s = general.kernel, small.kernel
    same = (general.params == small.params and g.grid == s.grid and g.threads == s.threads and g.folded == s.folded
            and not general.after and not small.after and general.workspaces == small.workspaces
            and general.parallel == small.parallel and general.index_bits == small.index_bits
            and general.shared_outputs == small.shared_outputs)
    if not same or _copies(s.body) >= _copies(g.body):  # nothing staged fewer times: the loops alone cost little
        return general
    ours = {b.sym: b for b in g.buffers}
    extra = [b for b in s.buffers if b.sym not in ours]
    if any(ours[b.sym] != b for b in s.buffers if b.sym in ours):
        return general
    taken = {b.sym.name for b in g.buffers}
    if any(b.sym.name in taken for b in extra):  # one name, two buffers: the emitted program would mix them up
        return general
    why = ir.Why(f"{size.name} at most {tile}: every walk over it is one tile, staged once (one_tile.py)")
    guarded = ir.Guarded(size, tile, s.body, g.body, why)
    kernel = dataclasses.replace(g, buffers=g.buffers + tuple(extra), body=(guarded,))
    merged = dataclasses.replace(general, kernel=kernel, names=general.names | small.names,
                                 read_outputs=general.read_outputs | small.read_outputs)
    try:
        return check(merged)
    except SepTranError:  # both versions' buffers do not fit where the general one alone did
        return general


def _copies(body) -> int:
    """The tile copies in a program's text (TileLang's or the vendor's): a version whose walks run once holds fewer."""
    return sum(isinstance(s, ir.Copy) or (isinstance(s, ir.VendorOp) and s.op in ("load", "store"))
               for s in ir.statements(body))
