"""Every element of an output tile the grid hands a program is written by that program.

``verify`` proves that the grid hands out every tile of each output; this
proves the step below: inside one program, the boxes its leaves write cover
the tile it was handed. A program whose inner partition writes batch 0 of a
tile that holds the whole batch (a tile size of ``None`` where ``1`` was
meant) would otherwise leave the rest as whatever memory held, and a passed
output would come back partly stale.

The proof is by enumeration at the program's corners: for the first and the
last index of every grid dimension, the leaves' boxes are listed over the
loops that move them (a loop that moves no write runs once here) and checked
to cover the handed tile, cell by cell, on the boxes' own boundaries. Sizes
that are not numbers (dynamic dimensions) and programs whose boxes are too
many to list are left to the grid-level proof, with a debug line.
"""
from __future__ import annotations

import itertools
import logging
from typing import Optional

import numpy as np

from septran.errors import LoweringError
from septran.expr import Var, evaluate, leaves
from septran.frontend.ir import Privilege
from septran.lowering import flat_ir as fl
from septran.lowering.constants import Constants, Context

log = logging.getLogger(__name__)

MAX_BOXES = 1 << 14  # writes listed per program corner before giving up
MAX_CELLS = 1 << 22  # cells of the compressed tile


class _TooMany(Exception):
    pass


def check_programs_cover(ctx: Context, consts: Constants, flat: fl.FlatProgram) -> None:
    """Refuses, at the entry's launch, a program that leaves part of an output tile it is handed unwritten."""
    outputs = [t for t in flat.tensors if t.role == "output"]
    if not outputs:
        return
    env = dict(consts.env)
    try:
        grid = [(Var(sym), evaluate(extent, env)) for sym, extent in flat.grid]
    except KeyError:
        log.debug("%s: coverage of output tiles not proven here: the grid depends on a dynamic size", flat.name)
        return
    if any(n <= 0 for _, n in grid):
        return  # no program runs
    writes = _writes(flat.program)
    for corner in itertools.product(*[sorted({0, n - 1}) for _, n in grid]):
        at = dict(env)
        at.update({v: i for (v, _), i in zip(grid, corner)})
        for t in outputs:
            handed = [op.view for op in flat.program.operands if op.view.of == t.sym]
            if not handed:
                continue  # never handed to the program: the pass that checks outputs are written reports it
            try:
                shape = [evaluate(e, at) for e in t.shape]
                tile = _box(handed[0], at, shape)
                if tile is None:
                    continue
                boxes = _boxes(writes.get(t.sym, ()), at, shape)
                hole = _hole(tile, boxes)
            except (KeyError, _TooMany):
                log.debug("%s: coverage of %s's tiles not proven here (dynamic sizes or too many writes)",
                          flat.name, t.sym.name)
                continue
            if hole is not None:
                _refuse(flat, t.sym.name, tile, hole, corner)


def _writes(program: fl.Invoke) -> dict:
    """tensor Sym -> [(view, the loops around the leaf that writes it, outermost first)]."""
    out: dict = {}

    def walk(stmts, loops):
        for st in stmts:
            if isinstance(st, fl.Loop):
                walk(st.body, loops + (st,))
            elif st.binding is not None:
                for op in st.operands:
                    if op.privilege is not Privilege.READ:
                        out.setdefault(op.view.of, []).append((op.view, loops))
            else:
                walk(st.body, loops)

    walk(program.body, ())
    return out


def _box(view: fl.View, at: dict, shape) -> Optional[tuple]:
    """The view's box, clipped to the tensor: ((lo, hi) per dimension), None where it is empty."""
    if len(view.offsets) != len(shape):
        raise _TooMany  # a view of another rank: not this proof's business
    box = []
    for off, ext, n in zip(view.offsets, view.extents, shape):
        lo = evaluate(off, at)
        hi = min(lo + evaluate(ext, at), n)
        lo = max(lo, 0)
        if hi <= lo:
            return None
        box.append((lo, hi))
    return tuple(box)


def _boxes(writes, at: dict, shape) -> set:
    boxes: set = set()
    for view, loops in writes:
        moved = {leaf for e in view.offsets + view.extents for leaf in leaves(e)}
        for assignment in _iterations(loops, at, moved):
            box = _box(view, assignment, shape)
            if box is not None:
                boxes.add(box)
            if len(boxes) > MAX_BOXES:
                raise _TooMany
    return boxes


def _iterations(loops, at: dict, moved: set):
    """Every assignment of the loops' variables the leaf's writes are listed at; a loop whose variable moves
    neither the write nor an inner loop's trip count runs once (its first iteration) here. So does a loop that
    runs no times for these shapes (a GEMM over K = 0): what its writes would cover comes back as the zeros an
    accumulation starts from, or is refused by the check that outputs are written (verify.py); this proof is
    of where the writes fall, not of how often they run."""
    if not loops:
        yield at
        return
    loop, rest = loops[0], loops[1:]
    trips = max(evaluate(loop.extent, at), 1)
    inner = moved | {leaf for l in rest for leaf in leaves(l.extent)}
    values = range(trips) if Var(loop.var) in inner else range(1)
    count = 0
    for i in values:
        for a in _iterations(rest, {**at, Var(loop.var): i}, moved):
            count += 1
            if count > MAX_BOXES:
                raise _TooMany
            yield a


def _hole(tile: tuple, boxes: set) -> Optional[tuple]:
    """A box of ``tile`` no write covers (on the writes' own boundaries), or None."""
    cuts = []
    for d, (lo, hi) in enumerate(tile):
        edges = {lo, hi}
        for b in boxes:
            edges.update(x for x in b[d] if lo < x < hi)
        cuts.append(sorted(edges))
    cells = 1
    for c in cuts:
        cells *= len(c) - 1
    if cells > MAX_CELLS:
        raise _TooMany
    covered = np.zeros([len(c) - 1 for c in cuts], dtype=bool)
    for b in boxes:
        index = []
        for d, (lo, hi) in enumerate(b):
            lo, hi = max(lo, tile[d][0]), min(hi, tile[d][1])
            if hi <= lo:
                break
            index.append(slice(cuts[d].index(lo), cuts[d].index(hi)))
        else:
            covered[tuple(index)] = True
    if covered.all():
        return None
    first = np.argwhere(~covered)[0]
    return tuple((cuts[d][i], cuts[d][i + 1]) for d, i in enumerate(first))


def _refuse(flat: fl.FlatProgram, name: str, tile: tuple, hole: tuple, corner) -> None:
    def box(b):
        return "[" + ", ".join(f"{lo}" if hi == lo + 1 else f"{lo}:{hi}" for lo, hi in b) + "]"

    where = ", ".join(f"{s.name} = {i}" for (s, _), i in zip(flat.grid, corner))
    raise LoweringError(
        f"the program{f' at {where}' if where else ''} is handed {name}{box(tile)} but no statement in it writes "
        f"{name}{box(hole)}: those elements would come back as whatever memory held",
        flat.program.launch.loc,
        hint=f"make the tiles the program writes (its partitions of {name}) cover the tile it is handed, or hand "
             "each program a smaller tile (the tile of this launch's partition)")

