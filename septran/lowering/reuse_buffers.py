"""Pass: reuse_buffers. Buffers of one tensor's tiles whose lives do not overlap become one buffer, and a tile an
elementwise statement computes from the last use of another's is computed over it, in its buffer.

The stager gives each staged operand a buffer of its own where it is staged: a row walked three times (softmax's
maximum, its exps, its scaling) stages X three times, in three buffers, though one walk ends before the next
begins. On a target whose buffers live on a stack for the whole program (the cpu), every one of them counts against
the memory's capacity and takes room in the caches; so a 16-bit row walked in 65,536-wide tiles needed five float32
buffers of 256 KiB. Here a buffer takes the place of an earlier one staged from the same tensor, in the same memory,
of the same type, shape and stages, whose last use comes before its first: the program names the earlier buffer
instead (``X_local`` for every walk's tile of X).

Tiles of different tensors share in one case: an elementwise statement that makes the last read of one tile and the
first write of another alike, reading the first only at the element it writes (``Y = exp(X - m)``), computes the
second over the first, in place; the buffer's allocation says so (``# then Y's, computed in place``). A softmax row
in one tile then takes one float32 buffer, not two (a vocabulary's 16-bit row fits the 1 MiB of LOCAL).

A buffer's life is conservative: from the first statement that names it to the last, and a use inside a loop spans
the whole outermost loop around it (its value may pass from one trip to the next), unless every use lies inside one
serial loop whose trips write the buffer before anything reads it: then it lives within a trip. The two versions of
a program whose walks may run once (``Guarded``, lowering/one_tile.py) are laid out one after the other: one of them
runs. Placed buffers (an address the vendor's calls name) and handles are left alone. Only targets that ask
(``reuse_buffers: true``).
"""
from __future__ import annotations

import copy
import dataclasses
import string

from septran.expr import Expr, Sym, Var
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir


def reuse_buffers(target, program: ir.TileProgram) -> ir.TileProgram:
    return ir.each_kernel(program, _reused) if target.reuse_buffers else program


def _reused(kernel: ir.KernelLaunch) -> ir.KernelLaunch:
    kernel, reach = _in_place(kernel)
    lives = {sym: _life(r) for sym, r in reach.items()}
    groups: dict = {}
    for b in kernel.buffers:
        if _sharable(b) and b.sym in lives:
            groups.setdefault((b.holds, *_kind(b)), []).append(b)
    instead: dict[Sym, Sym] = {}
    for bufs in groups.values():
        slots: list[list] = []  # [buffer kept, the last position it is used at]
        for b in sorted(bufs, key=lambda b: lives[b.sym]):
            first, last = lives[b.sym]
            slot = next((s for s in slots if s[1] < first), None)
            if slot is None:
                slots.append([b, last])
            else:
                instead[b.sym] = slot[0].sym
                slot[1] = max(slot[1], last)
    if not instead:
        return kernel
    also: dict[Sym, tuple] = {}  # what the kept buffers hold later, theirs and the merged buffers' (in place)
    for b in kernel.buffers:
        kept = instead.get(b.sym, b.sym)
        also[kept] = also.get(kept, ()) + tuple(t for t in b.also if t not in also.get(kept, ()))
    return dataclasses.replace(kernel, buffers=tuple(dataclasses.replace(b, also=also[b.sym]) if also[b.sym] != b.also else b
                                                     for b in kernel.buffers if b.sym not in instead),
                               body=_renamed(kernel.body, instead))


def _sharable(b: ir.Buffer) -> bool:
    return b.address is None and not b.handle and b.holds is not None


def _in_place(kernel: ir.KernelLaunch):
    """Where an elementwise statement is the last use of one staged tile and the first of another alike, and computes
    each element from the first's element at the same index only (``Y = exp(X - m)``), the second is computed over
    the first, in its buffer: a softmax row staged once, not twice (its exps where its inputs were). The kernel, and
    its reaches (``_reaches``) as they are then."""
    while True:
        walked = _walk(kernel.body)
        reach = _reaches(walked)
        plain = {b.sym: b for b in kernel.buffers if _sharable(b) and b.sym in reach}
        pair = next(filter(None, (_over(s, at, reach, plain) for at, (s, _) in enumerate(walked.stmts))), None)
        if pair is None:
            return kernel, reach
        kept, gone = pair
        merged = dataclasses.replace(kept, also=kept.also + (gone.holds,) + gone.also)
        kernel = dataclasses.replace(kernel, buffers=tuple(merged if b is kept else b for b in kernel.buffers if b is not gone),
                                     body=_renamed(kernel.body, {gone.sym: kept.sym}))


def _over(s, at: int, reach: dict, plain: dict):
    """(the tile read, the tile written) where statement ``s`` at position ``at`` may write the one over the other."""
    if not isinstance(s, ir.LeafCall) or not isinstance(s.store, el.Elt) or s.expr is None or s.atomic:
        return None
    at_store = _key(s.store.index)
    if sorted(at_store) != sorted(_key(Var(Sym(n))) for n in s.loop):
        return None  # each trip of the loop stores an element of its own (its indices, each once)
    out = plain.get(s.store.of)
    if out is None or reach[out.sym].get(at) != (at, at, False) or _life(reach[out.sym])[0] != at:
        return None  # (its first use, and not one a loop around it extends)
    named = list(ir.syms(s.expr))
    if out.sym in named:
        return None
    for n in el.nodes(s.expr):
        src = plain.get(n.of) if isinstance(n, el.Elt) else None
        if src is None or src is out or not _alike(src, out) or reach[src.sym].get(at) != (at, at, False) or \
                _life(reach[src.sym])[1] != at:
            continue
        same = sum(1 for m in el.nodes(s.expr) if isinstance(m, el.Elt) and m.of is src.sym and _key(m.index) == at_store)
        if same == sum(1 for x in named if x is src.sym):  # every read of it is the element written: no other
            return src, out
    return None


def _key(node):
    """An index expression as a value to compare: its Syms by name and number (a loop's index is a Sym made again
    from its name wherever an element names it)."""
    if isinstance(node, Sym):
        return ("sym", node.name, node.id)
    if isinstance(node, tuple):
        return tuple(_key(x) for x in node)
    if _is_data(node):
        return (type(node).__name__,) + tuple(_key(getattr(node, f.name)) for f in dataclasses.fields(node))
    return node if isinstance(node, (int, float, str, bool, type(None))) else ("?", id(node))


def _kind(b: ir.Buffer) -> tuple:
    """What two buffers that may be one must share."""
    return b.space, b.dtype, b.shape, b.stages, b.alloc


def _alike(a: ir.Buffer, b: ir.Buffer) -> bool:
    return _kind(a) == _kind(b)


@dataclasses.dataclass
class _Walked:
    stmts: list  # (statement, its chain: the loops and guarded versions around it, outermost first), in order
    spans: list  # each loop's first and last position (a chain's ("loop", k) names spans[k])


def _walk(body) -> _Walked:
    walked = _Walked([], [])

    def go(stmts, chain):
        for s in stmts:
            if isinstance(s, ir.For):
                mine = len(walked.spans)
                start = len(walked.stmts)
                walked.spans.append((start, start))
                go(s.body, chain + (("loop", mine, s.kind == "serial" and not s.parallel),))
                walked.spans[mine] = (start, max(len(walked.stmts) - 1, start))
            elif isinstance(s, ir.Guarded):
                go(s.then, chain + (("then", id(s)),))
                go(s.otherwise, chain + (("otherwise", id(s)),))
            else:
                walked.stmts.append((s, chain))

    go(body, ())
    return walked


def _reaches(walked: _Walked) -> dict[Sym, dict[int, tuple[int, int, bool]]]:
    """For each named Sym, each position that uses it and the positions its value must live over there, and whether
    a loop set them: the use alone, or the outermost loop around it (its value may pass from one trip to the next).
    Where every use lies inside one serial loop and the first, in that loop's body itself, writes the buffer without
    reading it, no value passes from one trip of that loop to the next (the stager writes a tile before any read of
    it), so only loops inside it extend a use."""
    uses: dict[Sym, list] = {}
    for at, (s, chain) in enumerate(walked.stmts):
        for sym in dict.fromkeys(_named(s)):
            uses.setdefault(sym, []).append((at, chain))
    reach = {}
    for sym, where in uses.items():
        common = where[0][1]
        for _, chain in where[1:]:
            common = common[:next((k for k, (a, b) in enumerate(zip(common, chain)) if a != b), min(len(common), len(chain)))]
        first, chain = where[0]
        loops = [c for c in common if c[0] == "loop"]  # (a pipelined loop's loads run a trip ahead: not that one)
        scoped = bool(loops) and loops[-1][2] and chain == common and _writes_first(walked.stmts[first][0], sym)
        reach[sym] = {}
        for at, chain in where:
            loops = [c[1] for c in (chain[len(common):] if scoped else chain) if c[0] == "loop"]
            reach[sym][at] = (*walked.spans[loops[0]], True) if loops else (at, at, False)
    return reach


def _named(s):
    """The Syms statement ``s`` names in the program: an elementwise leaf's operands only where its element
    expression or its template names them (softmax's scaling keeps X as an operand after its recomputable read chose
    the exps held in Y)."""
    if not isinstance(s, ir.LeafCall) or s.expr is None:
        return ir.syms(s)
    fields = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(s.template) if f}
    if "out" in fields and s.args:
        fields.add(s.args[0][0])  # (the emitter's name for the first operand)
    return ir.syms((s.store, s.expr, s.guard, s.flags, s.attrs, tuple(r for name, r in s.args if name in fields)))


def _writes_first(s, sym: Sym) -> bool:
    """Whether statement ``s`` writes buffer ``sym`` without reading it: a fill, a copy or load into it, an
    elementwise store whose value does not read it."""
    if isinstance(s, ir.Fill):
        return s.dst is sym
    if isinstance(s, ir.Copy):
        return s.dst.of is sym and s.dst.whole and sym not in set(ir.syms(s.src))
    if isinstance(s, ir.VendorOp):
        args = dict(s.args)
        return s.op in ("load", "fill_zero") and args["dst"].of is sym and args["dst"].whole and \
            all(sym not in set(ir.syms(r)) for name, r in s.args if name != "dst")
    if isinstance(s, ir.LeafCall):
        return isinstance(s.store, el.Elt) and s.store.of is sym and not s.atomic and sym not in set(ir.syms(s.expr))
    return False


def _life(reach: dict[int, tuple[int, int, bool]]) -> tuple[int, int]:
    """A Sym's (first, last) position in the program's statements, loops extending them (``_reaches``)."""
    return min(r[0] for r in reach.values()), max(r[1] for r in reach.values())


def _renamed(node, instead: dict):
    """``node`` with every Sym in ``instead`` replaced (new nodes where something changed; element expressions are
    copied, never changed in place: they may be shared)."""
    if isinstance(node, Sym):
        return instead.get(node, node)
    if isinstance(node, tuple):
        new = tuple(_renamed(x, instead) for x in node)
        return node if all(a is b for a, b in zip(new, node)) else new
    if isinstance(node, el.Elem):
        changed = {}
        for name, value in vars(node).items():
            if isinstance(value, (Sym, tuple, el.Elem, Expr)):  # (not the logic's objects a node may keep)
                new = _renamed(value, instead)
                if new is not value:
                    changed[name] = new
        if not changed:
            return node
        out = copy.copy(node)
        for name, value in changed.items():
            setattr(out, name, value)
        return out
    if _is_data(node) and not isinstance(node, ir.Why):
        changed = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            new = _renamed(value, instead)
            if new is not value:
                changed[f.name] = new
        return dataclasses.replace(node, **changed) if changed else node
    return node


def _is_data(value) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)
