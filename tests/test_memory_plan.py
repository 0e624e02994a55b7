"""The memory plan (septran/model/memory_plan.py): drawn lifetimes and sizes never put two live buffers on the
same bytes, the arena is never smaller than what lives at once, and a drawn program run in the arena computes
what it computes with fresh buffers. Nothing is built."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings, strategies as st

from septran.model.memory_plan import ALIGN, Buffer, live_peak, place


@st.composite
def lifetimes(draw):
    n = draw(st.integers(1, 24))
    out = []
    for i in range(n):
        start = draw(st.integers(0, 30))
        out.append(Buffer(f"b{i}", draw(st.integers(0, 5000)), start, start + draw(st.integers(0, 12))))
    return out


@seed(20)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lifetimes())
def test_live_buffers_never_overlap(buffers):
    placement = place(buffers)
    for b in buffers:
        off = placement.offsets[b.name]
        assert off % ALIGN == 0 and off + b.size <= placement.peak
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.meets(b) and a.size and b.size:
                oa, ob = placement.offsets[a.name], placement.offsets[b.name]
                assert oa + a.size <= ob or ob + b.size <= oa, (a, b, oa, ob)
    assert live_peak(buffers) <= placement.peak <= placement.unplanned


def test_buffers_that_never_meet_share_bytes():
    chain = [Buffer(f"b{i}", 1024, i, i + 1) for i in range(10)]  # each read only by the next step
    placement = place(chain)
    assert placement.peak == 2 * 1024 and placement.unplanned == 10 * 1024


@st.composite
def programs(draw):
    """Steps that each read one or two earlier values (an input or a step's) and write a new one."""
    n = draw(st.integers(1, 14))
    shapes = [draw(st.sampled_from([(3,), (5, 7), (1, 13), (4, 4)])) for _ in range(n)]
    steps = []
    for i in range(n):
        reads = draw(st.lists(st.integers(-1, i - 1), min_size=1, max_size=2))
        steps.append((draw(st.sampled_from(["add", "mul", "neg"])), reads))
    outputs = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))
    return shapes, steps, sorted(outputs)


def _whole(v: torch.Tensor, n: int) -> torch.Tensor:
    v = v.reshape(-1)
    return v.repeat(-(-n // v.numel()))[:n]


def _run(shapes, steps, outputs, x, arena_views=None):
    values = []
    for i, (op, reads) in enumerate(steps):
        n = torch.Size(shapes[i]).numel()
        args = [_whole(x if r < 0 else values[r], n).view(shapes[i]) for r in reads]  # every element of it read
        out = arena_views[i] if arena_views is not None and arena_views[i] is not None else torch.empty(shapes[i])
        if op == "neg" or len(args) == 1:
            torch.neg(args[0], out=out)
        elif op == "add":
            torch.add(args[0], args[1], out=out)
        else:
            torch.mul(args[0], args[1], out=out)
        values.append(out)
    return [values[o].clone() for o in outputs]


@seed(21)
@settings(max_examples=80, deadline=None)
@given(programs())
def test_a_program_in_the_arena_computes_what_it_computes_with_fresh_buffers(program):
    shapes, steps, outputs = program
    x = torch.arange(1, 200, dtype=torch.float32) / 7
    planned = []
    for i in range(len(steps)):
        if i in outputs:  # outputs are allocated per call, never in the arena
            continue
        readers = [j for j, (_, reads) in enumerate(steps) if i in reads]
        planned.append(Buffer(str(i), torch.empty(shapes[i]).numel() * 4, i, max(readers, default=i)))
    placement = place(planned)
    arena = torch.full((placement.peak // 4 + 1,), float("nan"))
    views = [None] * len(steps)
    for b in planned:
        n = b.size // 4
        views[int(b.name)] = arena[placement.offsets[b.name] // 4:][:n].view(shapes[int(b.name)])
    want = _run(shapes, steps, outputs, x)
    got = _run(shapes, steps, outputs, x, views)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
