"""Pass: parallel_loops. A ``parallel_range`` inside a program becomes TileLang's ``T.Parallel`` where it may.

``flatten`` marks the loops of such a range (``For.parallel``): their iterations need no order. On targets
that say ``parallel_in_program: true`` (GPUs), a nest of marked loops becomes ``for i in T.Parallel(n):``,
which TileLang fuses with the leaf's own ``T.Parallel`` into one loop spread over the threads, when:

- every extent of the nest is a number (TileLang finds no layout for a nested T.Parallel of symbolic extent);
- the nest is perfect and its body is ONE element statement (a ``task.compute`` or a named elementwise
  primitive): TileLang refuses a T.Parallel around a copy, a gemm, a fill, a reduction, or two loops
  ("Nested parallel loops are not allowed");
- the store's box is proved apart across every loop of the nest (``writes._separates``: along some
  dimension, a step of the loop moves the box further than the box reaches), so no two iterations
  write one element;
- the expression reads the stored tensor only at the stored element, so no iteration reads what another writes.

A leaf's loop over a tile that overhangs its tensor runs over its in-bounds part, ``T.min(BS, N - off)``; in
a nest it runs over the whole tile and the store is guarded (``if off + j < N: Y[off + j] = ...``), as the
reads past the end are already. Anything else stays loops in one order, and the loop's ``why`` (explain())
says why it is not T.Parallel. Several statements are not split into one T.Parallel nest each (loop fission)
here: that needs each statement's reads proved apart from the others' writes as well.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from septran.expr import Sym, Var, leaves
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.constants import Context
from septran.lowering.linear import linear
from septran.lowering.overhang import whole_tile
from septran.lowering.writes import _separates


def parallel_loops(ctx: Context, program: ir.TileProgram, value) -> ir.TileProgram:
    """``value``: an integer expression's value (the program's constants are numbers)."""
    if not ctx.target.parallel_in_program:
        return program
    pass_ = _Pass(program, value)
    return dataclasses.replace(program, kernel=dataclasses.replace(
        program.kernel, body=pass_.stmts(program.kernel.body)))


class _Pass:
    def __init__(self, program: ir.TileProgram, value):
        self.value = value
        self.values = {c.sym: c.value for c in program.consts if c.value is not None}
        self.shapes = {p.sym: p.shape for p in program.params} | {b.sym: b.shape for b in program.kernel.buffers}

    def stmts(self, stmts) -> tuple:
        return tuple(self.stmt(s) for s in stmts)

    def stmt(self, s):
        if not isinstance(s, ir.For):
            return s
        if not s.parallel:
            return dataclasses.replace(s, body=self.stmts(s.body))
        nest = [s]
        while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], ir.For) and nest[-1].body[0].parallel:
            nest.append(nest[-1].body[0])
        leaf, why_not = self.check(nest)
        if why_not is not None:
            why = dataclasses.replace(s.why, text=f"{s.why.text}: not T.Parallel, since {why_not}")
            return dataclasses.replace(s, why=why, body=self.stmts(s.body))
        out = leaf
        for f in reversed(nest):
            why = dataclasses.replace(f.why, text=f.why.text.replace(", in order", "") + ", as T.Parallel: "
                                      f"each iteration stores its own elements of {leaf.store.of.name}")
            out = dataclasses.replace(f, kind="parallel", body=(out,), why=why)
        return out

    def check(self, nest: list) -> tuple[Optional[ir.LeafCall], Optional[str]]:
        """(the nest's element statement, guarded where its tile overhangs; None) or (None, why not)."""
        for f in nest:
            if not self.number(f.extent):
                return None, f"the extent of {f.var.name}, {f.extent}, is not a number"
        body = nest[-1].body
        if len(body) != 1:
            return None, (f"its body holds {len(body)} statements ({_kinds(body)}), and TileLang's T.Parallel "
                          "takes one element statement")
        s = body[0]
        if not isinstance(s, ir.LeafCall) or s.expr is None or s.store is None or "T.Parallel(" not in s.template:
            return None, f"its body is {_kinds(body)}, which TileLang refuses inside T.Parallel"
        stored_at = {v.sym.name for i in s.store.index if not isinstance(i, el.Elem)
                     for v in leaves(i) if isinstance(v, Var)}
        if not set(s.loop) <= stored_at:  # a reduction's loop: several of its own iterations store one element
            return None, f"its body ({s.impl}) stores one element from several iterations of its own loop"
        _, out = s.args[0]
        if out.of != s.store.of or not all(self.number(e) for e in out.extents):
            return None, f"the tile {s.store.of.name} it stores has no size in numbers"
        loops = {f.var: self.value(f.extent) - 1 for f in nest}
        for f in nest:
            if not self.apart(out, f.var, loops):
                return None, (f"two iterations of {f.var.name} may store into one element of {s.store.of.name} "
                              "(not proved apart)")
        stored = tuple(map(str, s.store.index))
        for e in el.nodes(s.expr):
            if isinstance(e, el.Elt) and e.of == s.store.of and tuple(map(str, e.index)) != stored:
                return None, f"it reads {s.store.of.name} at another element than the one it stores"
        return whole_tile(s, self.shapes[out.of]), None  # the loop over the whole tile (a number), the store guarded

    def apart(self, region: ir.Region, var: Sym, loops: dict) -> bool:
        """Whether iterations that differ in ``var`` store into disjoint boxes of ``region``'s buffer. In the nest,
        its loops reach their extents; everything else (grid indices, loops around the nest) stays fixed."""
        spans = {}
        for off in region.offsets:
            for atom in linear(off, self.values)[0]:
                if isinstance(atom, Sym):
                    spans[atom] = loops.get(atom, 0)
                elif not any(isinstance(v, Var) and v.sym in loops for v in leaves(atom)):
                    spans[atom] = 0  # e.g. a folded grid index's part (bz // 4): fixed in the program
        return _separates(region, var, self.values, self.value, spans)

    def number(self, e) -> bool:
        try:
            self.value(e)
            return True
        except KeyError:
            return False


def _kinds(stmts) -> str:
    names = {ir.Copy: "a copy (T.copy)", ir.Fill: "a fill (T.fill / T.clear)", ir.VendorOp: "a vendor call",
             ir.For: "a loop in order"}
    out = []
    for s in stmts:
        if isinstance(s, ir.LeafCall):
            out.append(f"an element compute ({s.impl})" if s.expr is not None else f"a tile operation ({s.impl})")
        else:
            out.append(names[type(s)])
    return ", ".join(dict.fromkeys(out))
