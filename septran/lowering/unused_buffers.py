"""Pass: unused_buffers. A buffer no statement names is not allocated.

A logic may declare a temporary that some of its forms never touch (softmax's tile of exps, which a matrix's rows
leave unused: their exps go into Y); the mapping still names its memory. Such a buffer costs nothing once
compiled (C drops an unused array), but it would count against its memory's capacity and refuse a tile that fits
(a 16-bit row of 65,536 staged in float32). Runs before ``capacity``, on the program as it will be emitted.
"""
from __future__ import annotations

import dataclasses

from septran.lowering import tile_ir as ir


def drop_unused_buffers(program: ir.TileProgram) -> ir.TileProgram:
    return ir.each_kernel(program, _used_only)


def _used_only(kernel: ir.KernelLaunch) -> ir.KernelLaunch:
    named = set(ir.syms(kernel.body))
    kept = tuple(b for b in kernel.buffers if b.sym in named)
    return kernel if len(kept) == len(kernel.buffers) else dataclasses.replace(kernel, buffers=kept)
