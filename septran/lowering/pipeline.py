"""TaskGraph + Mapping + Target -> TileProgram, as a list of passes.

Read it top to bottom, as Halide's ``Lower.cpp``: each pass is a function
from one frozen stage to the next, and with ``SEPTRAN_DUMP_DIR`` set each
stage is written as text (``<tag>.<NN>-<pass>.txt``) so that a decision can
be traced to the pass that made it. No TileLang text is produced here; the
emitter prints what these passes decide.
"""
from __future__ import annotations

from typing import Callable, Optional

from septran.errors import internal_errors
from septran.frontend.printer import format_graph
from septran.frontend.shapes import ShapeRelations
from septran.lowering import one_tile, tile_ir as ir
from septran.lowering.bind import check_mapping
from septran.lowering.bits_dtypes import hold_as_bits
from septran.lowering.capacity import check_capacity
from septran.lowering.tilelang_limits import check_tilelang_limits
from septran.lowering.combine import combine
from septran.lowering.constants import Context, Specialization, resolve_constants
from septran.lowering.explain import explain
from septran.lowering.flat_ir import format_flat
from septran.lowering.flatten import flatten
from septran.lowering.parallel_loops import parallel_loops
from septran.lowering.place import place
from septran.lowering.reuse_buffers import reuse_buffers
from septran.lowering.stage import stage
from septran.lowering.unused_buffers import drop_unused_buffers
from septran.lowering.verify import verify
from septran.lowering.writes import writes
from septran.mapping.schema import Mapping
from septran.target import Target

Dump = Callable[[str, Callable[[], str]], None]  # (name, make the text): called only when dumping


def lower(graph, mapping: Mapping, target: Target, spec: Specialization, shapes: ShapeRelations,
          dump: Optional[Dump] = None, checked: bool = False) -> ir.TileProgram:
    """``checked``: the caller ran ``check_mapping`` already (``septran.compile`` does, once per kernel)."""
    dump = dump or (lambda name, make: None)
    ctx = Context(graph, mapping, target, spec, shapes)
    inputs = f"logic {graph.entry_task.loc.file}, mapping {mapping.file}, target {target.name}, shapes {dict(spec.shapes)}"
    dump("00-taskgraph", lambda: format_graph(graph))
    # The mapping's rules first: every later pass may assume names resolve and memories exist.
    if not checked:
        with internal_errors("check", inputs):
            check_mapping(graph, mapping, target)
    # Problem sizes and tunables become named numbers once; every pass after reads them from here.
    with internal_errors("constants", inputs):
        consts = resolve_constants(ctx)
    dump("01-constants", lambda: "\n".join(f"{c.sym.name} = {c.value}    because: {c.why}" for c in consts.consts) + "\n")
    # Instances inlined into one program of the grid; views in their tensors' coordinates, nothing staged.
    with internal_errors("flatten", inputs):
        flat, names = flatten(ctx, consts)
    dump("02-flatten", lambda: format_flat(flat))
    # Before anything is allocated or emitted: every index in its grid, every read in its tile.
    with internal_errors("verify", inputs):
        flat = verify(ctx, consts, flat)
    dump("03-verify", lambda: format_flat(flat))

    def finish(names: frozenset, assume=None, suffix: str = "") -> ir.TileProgram:
        # Buffers and copies where mems changes the memory; leaves bound to the target's implementations.
        with internal_errors("stage", inputs):
            program = stage(ctx, consts, flat, names, assume)
        dump(f"04-stage{suffix}", lambda: explain(program))
        # Memories TileLang does not know: addresses, descriptors and vendor calls (targets that have them).
        with internal_errors("place", inputs):
            program = place(ctx, program, consts.value)
        dump(f"05-place{suffix}", lambda: explain(program))
        # On the final statements: which grid indices may run at once, which outputs must start from zeros.
        with internal_errors("writes", inputs):
            program = writes(ctx, program, consts.value)
        # A parallel_range inside a program: T.Parallel where the target has it and each iteration stores its own
        # elements.
        with internal_errors("parallel_loops", inputs):
            program = parallel_loops(ctx, program, consts.value)
        # Outputs that several programs add into: one at a time, atomic adds (the mapping's combine), or refused.
        with internal_errors("combine", inputs):
            program = combine(ctx, program)
        # A temporary no statement names (a logic's form that leaves it unused) is not allocated, nor counted.
        with internal_errors("unused_buffers", inputs):
            program = drop_unused_buffers(program)
        # Where the target's buffers live for the whole program: one buffer for alike ones whose lives do not overlap.
        with internal_errors("reuse_buffers", inputs):
            program = reuse_buffers(ctx.target, program)
        # On what will be emitted: each memory holds what one program allocates.
        with internal_errors("capacity", inputs):
            program = check_capacity(ctx, program, consts.value)
        # Tensors kept in a type TileLang cannot compute in (keep_dtypes): only functions named for the type touch them.
        with internal_errors("bits_dtypes", inputs):
            program = hold_as_bits(ctx, program)
        # Last: nothing the target's TileLang is known to compile wrongly (backends/<t>/target.yaml).
        with internal_errors("tilelang_limits", inputs):
            return check_tilelang_limits(ctx, program)

    general = finish(names)
    # Walks over a dynamic size that run once where it fits a tile: that version too, chosen in the program.
    small = one_tile.one_tile_size(consts, flat) if target.one_tile_versions else None
    if small is None:
        return general
    size, tile = small
    version = finish(frozenset(names) | general.names, {size: tile}, "-one-tile")
    with internal_errors("one_tile", inputs):
        # (the two versions' buffers alike share too: one of them runs)
        return one_tile.merge(general, version, size, tile,
                              lambda p: check_capacity(ctx, reuse_buffers(ctx.target, p), consts.value))
