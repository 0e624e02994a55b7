"""Pass: tilelang_limits. Programs that TileLang compiles wrongly on a target, refused before it sees them.

Runs last, on the program as it will be emitted. Each limit is a fact of the target (backends/<t>/target.yaml),
measured on a device; the refusal names the mapping line to change and what to change it to.
"""
from __future__ import annotations

from septran.errors import LoweringError
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context

# T.copy keywords that make a global -> shared copy something other than a TMA load.
_NOT_TMA = (("disable_tma", True), ("prefer_instruction", "cp_async"), ("prefer_instruction", "sync"))


def check_tilelang_limits(ctx: Context, program: ir.TileProgram) -> ir.TileProgram:
    if ctx.target.nested_tma_pipelines_wrong:
        _nested_tma_pipelines(ctx, program.kernel.body, outer=None)
    return program


def _nested_tma_pipelines(ctx: Context, body, outer) -> None:
    """A pipelined loop with TMA copies inside another sequential loop of the program (see the target field)."""
    for stmt in body:
        if not isinstance(stmt, ir.For):
            continue
        if stmt.kind == "pipelined" and (stmt.num_stages or 0) > 0 and outer is not None:
            tma = [c for c in ir.statements(stmt.body)
                   if isinstance(c, ir.Copy) and not any(o in _NOT_TMA for o in c.options)]
            if tma:
                names = sorted({c.src.of.name for c in tma})
                raise LoweringError(
                    f"{ctx.target.name}: this pipelined loop sits inside the sequential loop {outer.var.name} of the "
                    f"same program and loads {', '.join(names)} by TMA; TileLang 0.1.15 warp-specialises it and then "
                    f"repeats what comes before it (an accumulator's clear) at every iteration of {outer.var.name}: "
                    f"wrong results", stmt.why.mapping or outer.why.mapping,
                    hint="load them by cp.async (add copy: {" + ", ".join(f"{n}: {{disable_tma: true}}" for n in names)
                         + "} to this instance), or delete its pipeline")
        _nested_tma_pipelines(ctx, stmt.body, stmt if stmt.kind != "parallel" else outer)
