"""Pass: reuse_buffers. Buffers of one tensor's tiles whose lives do not overlap become one buffer.

The stager gives each staged operand a buffer of its own where it is staged: a row walked three times (softmax's
maximum, its exps, its scaling) stages X three times, in three buffers, though one walk ends before the next
begins. On a target whose buffers live on a stack for the whole program (the cpu), every one of them counts against
the memory's capacity and takes room in the caches; so a 16-bit row walked in 65,536-wide tiles needed five float32
buffers of 256 KiB. Here a buffer takes the place of an earlier one staged from the same tensor, in the same memory,
of the same type, shape and stages, whose last use comes before its first: the program names the earlier buffer
instead (``X_local`` for every walk's tile of X). Tiles of different tensors keep their own buffers, so the program
reads as before; temporaries too.

A buffer's life is conservative: from the first statement that names it to the last, and a use inside a loop spans
the whole outermost loop around it (its value may pass from one trip to the next). The two versions of a program
whose walks may run once (``Guarded``, lowering/one_tile.py) are laid out one after the other: one of them runs.
Placed buffers (an address the vendor's calls name) and handles are left alone. Only targets that ask
(``reuse_buffers: true``).
"""
from __future__ import annotations

import copy
import dataclasses

from septran.expr import Expr, Sym
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir


def reuse_buffers(target, program: ir.TileProgram) -> ir.TileProgram:
    return ir.each_kernel(program, _reused) if target.reuse_buffers else program


def _reused(kernel: ir.KernelLaunch) -> ir.KernelLaunch:
    lives = _lives(kernel.body)
    groups: dict = {}
    for b in kernel.buffers:
        if b.address is None and not b.handle and b.holds is not None and b.sym in lives:
            groups.setdefault((b.holds, b.space, b.dtype, b.shape, b.stages, b.alloc), []).append(b)
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
    return dataclasses.replace(kernel, buffers=tuple(b for b in kernel.buffers if b.sym not in instead),
                               body=_renamed(kernel.body, instead))


def _lives(body) -> dict[Sym, tuple[int, int]]:
    """Each named Sym's (first, last) position in the program's statements, a loop's uses spanning the loop."""
    uses: list = []  # (sym, position, the outermost loop around it (its index in spans) or None)
    spans: list[tuple[int, int]] = []  # each outermost loop's first and last position
    count = 0

    def walk(stmts, outer):
        nonlocal count
        for s in stmts:
            if isinstance(s, ir.For):
                if outer is not None:
                    walk(s.body, outer)
                    continue
                start = count
                mine = len(spans)
                spans.append((start, start))
                walk(s.body, mine)
                spans[mine] = (start, max(count - 1, start))
            elif isinstance(s, ir.Guarded):
                walk(s.then, outer)
                walk(s.otherwise, outer)
            else:
                for sym in ir.syms(s):
                    uses.append((sym, count, outer))
                count += 1

    walk(body, None)
    lives: dict[Sym, tuple[int, int]] = {}
    for sym, at, outer in uses:
        lo, hi = spans[outer] if outer is not None else (at, at)
        old = lives.get(sym)
        lives[sym] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    return lives


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
