"""``kernel.explain()``: every allocation, copy, loop and call, with the key and line that caused it."""
from __future__ import annotations

from septran.expr import Expr
from septran.lowering import tile_ir as ir
from septran.resources import display_name


def _region(r: ir.Region) -> str:
    if r.whole:
        return r.of.name
    return f"{r.of.name}[" + ", ".join(f"{o}:+{e}" for o, e in zip(r.offsets, r.extents)) + "]"


def _shape(shape: tuple[Expr, ...]) -> str:
    return "(" + ", ".join(str(e) for e in shape) + ")"


def _stmt(s, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, ir.Fill):
        out.append(f"{pad}fill {s.dst.name} = {s.value}\n{pad}    because: {s.why}")
    elif isinstance(s, ir.Copy):
        opts = "".join(f", {k}={v!r}" for k, v in s.options)
        out.append(f"{pad}copy {_region(s.src)} -> {_region(s.dst)}{opts}\n{pad}    because: {s.why}")
    elif isinstance(s, ir.VendorOp):
        args = ", ".join(f"{n}={_region(r)}" for n, r in s.args)
        out.append(f"{pad}vendor {s.op}({args})\n{pad}    because: {s.why}")
    elif isinstance(s, ir.LeafCall):
        args = ", ".join(f"{n}={_region(r)}" for n, r in s.args)
        out_region = s.args[0][1] if s.args else None
        clipped = (s.store is not None and out_region.whole and out_region.valid
                   and tuple(out_region.valid) != tuple(out_region.extents))
        over = f" over {_shape(out_region.valid)} of the tile: its in-bounds part (clip_staged.py)" if clipped else ""
        out.append(f"{pad}call {s.impl}({args}){over}\n{pad}    because: {s.why}")
    elif isinstance(s, ir.For):
        stages = f", {s.num_stages} stages" if s.kind == "pipelined" else ""
        out.append(f"{pad}loop {s.var.name} in 0..{s.extent} ({s.kind}{stages})\n{pad}    because: {s.why}")
        for b in s.body:
            _stmt(b, depth + 1, out)
    elif isinstance(s, ir.Guarded):
        out.append(f"{pad}where 1 <= {s.size.name} <= {s.at_most}\n{pad}    because: {s.why}")
        for b in s.then:
            _stmt(b, depth + 1, out)
        out.append(f"{pad}else")
        for b in s.otherwise:
            _stmt(b, depth + 1, out)


def explain(program: ir.TileProgram) -> str:
    out = [f"tile program {program.name} for target {program.target}",
           f"  logic:   {display_name(program.logic_file)}", f"  mapping: {display_name(program.mapping_file)}", "constants:"]
    for c in program.consts:
        out.append(f"  {c.sym.name} = {c.value}    because: {c.why}")
    out.append("kernel arguments:")
    for p in program.params:
        out.append(f"  {p.sym.name}: {_shape(p.shape)} {p.dtype} ({p.role})")
    k = program.kernel
    grid = ", ".join(f"{s.name} < {e}" for s, e in k.grid)
    out.append(f"grid {grid}" + (f", {k.threads} threads" if k.threads else "") + f"\n    because: {k.why}")
    if program.parallel is not None:
        out.append(f"  {program.parallel.describe()}")
    if program.read_outputs:
        out.append(f"  outputs read before written, so they start from zeros: {', '.join(sorted(program.read_outputs))}")
    for b in k.buffers:
        how = b.alloc or (f"placed at {b.address.name}" if b.address is not None else "placed by the vendor's calls")
        out.append(f"  alloc {b.sym.name}: {_shape(b.shape)} {b.dtype} in {b.space} ({how})\n      because: {b.why}")
    for s in k.body:
        _stmt(s, 1, out)
    for k in program.after:
        grid = ", ".join(f"{s.name} < {e}" for s, e in k.grid)
        out.append(f"then grid {grid}" + (f", {k.threads} threads" if k.threads else "") + f"\n    because: {k.why}")
        for s in k.body:
            _stmt(s, 1, out)
    return "\n".join(out) + "\n"
