"""Elementwise loops over a staged tile that overhangs its tensor run over its in-bounds part only.

A tile staged on chip from one that overhangs its tensor (a row of 1500 in a 4104-wide LOCAL tile) holds the
load's zeros past the tensor's end, and elementwise code over the tile computes there too: a bfloat16 softmax's
exps and scaling over 4104 elements for 1500 (2048 x 1500, 1 thread, AMD EPYC Zen 4: 0.32x torch). What it
computes there is read by nobody where every reader of the buffer reads its in-bounds part only:

- the copy out to its tensor (a copy stores what lies inside the tensor);
- a row reduction given the in-bounds extents (``leaf_calls._in_bounds``: the vendor's row primitives);
- an elementwise loop that is clipped too, reading the buffer at its own indices, each of which runs over the
  buffer's in-bounds extent along its dimension (Y[i, j] = X[i, j] * W[j]: X's and W's columns alike).

A buffer with any other reader (a loop over a whole temp, a reduction of a whole tile, another leaf, a copy to
another buffer) keeps its loops over the whole tile, as before. The clipped loops are found as the largest set
that holds together: a buffer leaves it when one of its readers is not clipped, until none does.

The set is found on a first staging of the program (``stage``); a second one lowers those loops over the
in-bounds part (``leaf_calls``), where a read of a tensor in place along a clipped dimension then needs no guard
either (``kept_in_by_the_loop``: a guarded load keeps g++ from vectorising the loop).

Only targets that say ``clip_staged_loops`` (cpu): their elementwise loops are plain loops, whose extent may be an
expression; TileLang's ``T.Parallel`` over a GPU fragment needs a number.
"""
from __future__ import annotations

import dataclasses

from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir


def clippable(stmts: tuple, valid: dict, buffers: set) -> dict:
    """Buffer name -> in-bounds extents, for each staged, overhanging buffer whose elementwise writers may loop over
    that part only (see the module's docstring). ``valid``: buffer -> the in-bounds extents of the tile staged into
    it, in the buffer's dimensions (stage's ``staged_valid``); ``buffers``: every buffer's symbol."""
    flat = list(ir.statements(stmts))
    clipped = set(valid)
    changed = True
    while changed:  # a buffer with a reader that would read past its in-bounds part leaves, until none has one
        changed = False
        for s in flat:
            for sym in _reads(s) & clipped:
                if not _reads_inside(s, sym, valid, clipped, buffers):
                    clipped.discard(sym)
                    changed = True
    return {sym.name: valid[sym] for sym in clipped}


def _elementwise(s) -> bool:
    return isinstance(s, ir.LeafCall) and s.store is not None


def _reads(s) -> set:
    """The tensors and buffers statement ``s`` reads."""
    if isinstance(s, ir.Copy):
        return {s.src.of}
    if _elementwise(s):
        return {n.of for n in el.nodes(s.expr) if isinstance(n, el.Elt)}
    if isinstance(s, (ir.LeafCall, ir.VendorOp)):
        return {r.of for _, r in s.args}
    return set()


def _reads_inside(s, sym, valid: dict, clipped: set, buffers: set) -> bool:
    """Whether ``s`` reads only the in-bounds part of buffer ``sym``, the loops of ``clipped``'s writers clipped."""
    v = valid[sym]
    if isinstance(s, ir.Copy):  # out to its tensor: what lies inside the tensor (into a buffer: all of it)
        return s.src.whole and s.dst.of not in buffers
    if _elementwise(s):  # a clipped loop whose indices keep each read of the buffer in its in-bounds part
        out = s.args[0][1]
        if not (out.whole and out.of in clipped and len(s.loop) == len(valid[out.of])):
            return False
        loop = {name: extent for name, extent in zip(_printed(s.store.index), valid[out.of])}
        return all(len(n.index) == len(v) and all(loop.get(i) == e for i, e in zip(_printed(n.index), v))
                   for n in el.nodes(s.expr) if isinstance(n, el.Elt) and n.of is sym)
    if isinstance(s, ir.LeafCall):  # a row reduction told the in-bounds extents (leaf_calls._in_bounds)
        return ir.told_in_bounds(s) and all(r.valid == v for _, r in s.args if r.of is sym)
    return False


def _printed(index: tuple) -> tuple:
    """An element's index as the program prints it: a loop's indices are named, each leaf's by its own symbols."""
    return tuple(map(str, index))
