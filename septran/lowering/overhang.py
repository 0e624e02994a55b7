"""A store over a tile that overhangs its tensor, as one loop over the whole tile with the store guarded.

TileLang refuses a ``T.Parallel`` of a symbolic extent (the in-bounds part, ``T.min(BN, N - bx * BN)``) that
indexes a fragment; so where the loop must be ``T.Parallel`` (a combine's atomic add, a parallel_range nest, a
two-kernel combine's slots), it runs over the whole tile, a number, and each store is guarded
(``if bx * BN + j < N: ...``).
"""
from __future__ import annotations

import dataclasses

from septran.lowering import tile_ir as ir


def guard(region: ir.Region, index: tuple, shape: tuple) -> tuple:
    """(index, extent) for each dimension where ``region`` overhangs its tensor of ``shape``: the stored
    element's ``index`` there must stay below the extent."""
    return tuple((index[d], shape[d]) for d, (v, e) in enumerate(zip(region.valid, region.extents)) if v != e)


def whole_tile(s: ir.LeafCall, shape: tuple) -> ir.LeafCall:
    """``s``, storing into its first operand (a tensor of ``shape``), looped over the whole tile and guarded."""
    name, out = s.args[0]
    extra = guard(out, s.store.index, shape)
    if out.of != s.store.of or not extra:
        return s
    args = ((name, dataclasses.replace(out, valid=())),) + s.args[1:]  # (): the loop covers the whole tile
    return dataclasses.replace(s, args=args, guard=s.guard + extra)
