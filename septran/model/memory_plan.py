"""Static memory planning for a compiled graph's intermediates: one arena, buffers placed by liveness.

A buffer lives from the step that writes it to the last step that reads it (or a view of it), both included.
Two buffers whose lifetimes meet never overlap in the arena; two that never live at once may share bytes.
Placement is greedy by size (TFLite's "greedy by size" planner, the one MLC-LLM and Hidet also start from):
the largest buffer first, each at the lowest aligned offset that clears every placed buffer it lives beside.
Pure Python, no torch: the property test (tests/test_memory_plan.py) draws lifetimes and sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64  # bytes: a cache line, and the widest vector load the CPU kernels issue


@dataclass(frozen=True)
class Buffer:
    """An intermediate: ``size`` bytes, written at step ``start``, last read at step ``end`` (start <= end)."""

    name: str
    size: int
    start: int
    end: int

    def meets(self, other: "Buffer") -> bool:
        """Both live at some step."""
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Placement:
    offsets: dict  # name -> byte offset into the arena
    peak: int  # the arena's size in bytes: the most the intermediates ever need at once, as placed
    unplanned: int  # what fresh allocations would have held at most (the sum of every buffer's size)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def place(buffers: list[Buffer]) -> Placement:
    """Each buffer's offset: no two buffers that live at once overlap."""
    placed: list[tuple[int, int, Buffer]] = []  # (offset, end offset, buffer), kept sorted by offset
    offsets: dict = {}
    for b in sorted(buffers, key=lambda b: (-b.size, b.start, b.name)):
        size = _aligned(max(b.size, 1))
        offset = 0
        for lo, hi, other in placed:  # sorted by offset: the first gap that holds it
            if not b.meets(other):
                continue
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[b.name] = offset
        placed.append((offset, offset + size, b))
        placed.sort(key=lambda t: (t[0], t[1]))
    peak = max((hi for _, hi, _ in placed), default=0)
    return Placement(offsets, peak, sum(_aligned(max(b.size, 1)) for b in buffers))


def live_peak(buffers: list[Buffer]) -> int:
    """The most bytes alive at one step: no placement can use less (the property test's lower bound)."""
    steps = {b.start for b in buffers}
    return max((sum(_aligned(max(b.size, 1)) for b in buffers if b.start <= s <= b.end) for s in steps), default=0)
