"""Pass: capacity. Every on-chip memory holds what one program allocates in it.

Runs last, on the program as it will be emitted: pipelined buffers count once
per stage where the memory keeps one copy per stage, and a placed memory also
loses its alignment padding. TileLang compiles programs that cannot launch
(262 KB of shared memory on sm_90 builds), so SepTran checks this itself.
"""
from __future__ import annotations

from septran.errors import LoweringError
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context


def check_capacity(ctx: Context, program: ir.TileProgram, value) -> ir.TileProgram:
    used: dict[str, list[tuple[ir.Buffer, int]]] = {}
    for buf in program.kernel.buffers:
        size = ir.buffer_bytes(buf, value)
        used.setdefault(buf.space, []).append((buf, size))
    for space, items in used.items():
        mem = ctx.target.memories[space]
        total = sum(s for _, s in items)
        if mem.placed:
            end = 0
            for _, size in items:
                end = -(-end // mem.align_bytes) * mem.align_bytes + size
            total = max(total, end)
        cap = mem.capacity_bytes
        if cap is not None and total > cap:
            biggest, _ = max(items, key=lambda x: x[1])
            detail = ", ".join(
                f"{b.sym.name} {'x'.join(str(value(e)) for e in b.shape)} {b.dtype}"
                + (f" x {b.stages} stages" if b.stages > 1 else "")
                for b, _ in items
            )
            raise LoweringError(
                f"{space} needs {total} bytes per program ({detail}), but {ctx.target.name} has {cap}",
                biggest.why.mapping,
                hint="use smaller tunables or fewer pipeline stages",
            )
    return program

