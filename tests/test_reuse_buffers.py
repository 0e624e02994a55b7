"""Buffers a program never names are not allocated (lowering/unused_buffers.py), and tiles of one tensor whose
lives do not overlap share one buffer (lowering/reuse_buffers.py).

Checked: the lives' rules on hand-made programs (statements one after another share; uses inside one loop, or a
loop and a statement inside it, do not; a use inside a loop spans the loop; the two versions of a guarded program
share; tiles of different tensors, temps, other shapes or types never share; a target without the key keeps
every buffer); a buffer written first in each trip of the loop that holds all its uses lives within a trip; an
elementwise statement that reads the last of one staged tile at the element it writes of another's first computes
the second in the first's buffer, and nothing else does (a shifted read, another read of it, a value carried from
a trip before); random nests of loops, guarded versions, writes, reads and such elementwise maps over tiles of two
tensors (hypothesis): every read sees the value it saw before the buffers were shared, loops run twice, either
version; the shipped softmax: its unused tile of exps gone, a 16-bit row of a vocabulary in one buffer (X's row,
then its exps and Y's), in one 262128-wide tile or walked, right under the FlashAttention rule.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import septran
from conftest import assert_flash_rule
from test_cpu_vendor import SETTINGS
from septran.expr import Const, Sym, Var, fresh
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir
from septran.lowering.reuse_buffers import reuse_buffers
from septran.lowering.unused_buffers import drop_unused_buffers

WHY = ir.Why("test")
X, Y = fresh("X"), fresh("Y")


class _Target:
    reuse_buffers = True


def _buf(name, holds=X, shape=(Const(64),), dtype="float32") -> ir.Buffer:
    return ir.Buffer(fresh(name), shape, dtype, "LOCAL", "alloc_local", WHY, holds=holds)


def _use(buf) -> ir.Fill:
    return ir.Fill(buf.sym, 0, WHY)


def _map(src, dst, shift: int = 0, at=None) -> ir.LeafCall:
    """dst[a] = exp(src[a + shift]), an elementwise leaf over a 64-element tile (dst[at] = exp(src[at]) where given)."""
    a = Var(Sym("a")) if at is None else at
    read = el.Elt(src.sym, (a + shift if shift else a,))
    return ir.LeafCall("vector_loops", "for {indices} in T.grid(64):\n    {body}", (), WHY,
                       store=el.Elt(dst.sym, (Var(Sym("a")) if at is None else at,)), expr=el.Call("exp", (read,)), loop=("a",))


def _loop(*body) -> ir.For:
    return ir.For(fresh("k"), Const(4), "serial", None, tuple(body), WHY)


def _program(buffers, body) -> ir.TileProgram:
    kernel = ir.KernelLaunch((), None, tuple(buffers), tuple(body), WHY)
    return ir.TileProgram("p", "cpu", "tilelang.language", (), (), kernel, "logic.py", "mapping.yaml")


def _kept(buffers, body, target=_Target()) -> list[str]:
    program = reuse_buffers(target, _program(buffers, body))
    named = set(ir.syms(program.kernel.body)) & {b.sym for b in buffers}
    assert named <= {b.sym for b in program.kernel.buffers}  # every statement names a buffer that is allocated
    return [b.sym.name for b in program.kernel.buffers]


OUT = fresh("out")


def _read(buf) -> ir.Copy:
    region = lambda sym: ir.Region(sym, (Const(0),), (Const(64),), True)  # noqa: E731
    return ir.Copy(region(buf.sym), region(OUT), (), WHY)


def test_tiles_of_one_tensor_one_after_another_share():
    a, b, c = _buf("a"), _buf("b"), _buf("c")
    assert _kept([a, b, c], [_loop(_use(a)), _loop(_use(b)), _use(c)]) == ["a"]


def test_lives_that_overlap_do_not_share():
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_loop(_use(a), _use(b), _read(a), _read(b))]) == ["a", "b"]  # one loop: each trip uses both
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_use(a), _use(b), _use(a)]) == ["a", "b"]  # b between two uses of a


def test_a_use_inside_a_loop_spans_the_outermost_loop():
    a, b = _buf("a"), _buf("b")  # a read in a later trip of the outer loop must still hold its value
    assert _kept([a, b], [_loop(_loop(_read(a)), _loop(_use(b)), _use(a))]) == ["a", "b"]
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_loop(_use(a)), _loop(_loop(_use(b)))]) == ["a"]


def test_the_versions_of_a_guarded_program_share():
    a, b = _buf("a"), _buf("b")
    guarded = ir.Guarded(fresh("n"), 64, (_loop(_use(a)),), (_loop(_use(b)),), WHY)
    assert _kept([a, b], [guarded]) == ["a"]


def test_only_alike_tiles_of_one_tensor_share():
    a, other, temp = _buf("a"), _buf("other", holds=Y), _buf("temp", holds=None)
    wide, half = _buf("wide", shape=(Const(128),)), _buf("half", dtype="float16")
    bufs = [a, other, temp, wide, half]
    assert _kept(bufs, [_use(b) for b in bufs]) == ["a", "other", "temp", "wide", "half"]


def test_a_buffer_written_first_in_each_trip_lives_within_a_trip():
    a, b = _buf("a"), _buf("b")  # each trip writes a, then reads it; then b: they need not both live
    assert _kept([a, b], [_loop(_use(a), _read(a), _use(b), _read(b))]) == ["a"]
    a, b = _buf("a"), _buf("b")  # a read first: the value may come from the trip before
    assert _kept([a, b], [_loop(_read(a), _use(a), _use(b), _read(b))]) == ["a", "b"]
    a, b = _buf("a"), _buf("b")  # a written before the loop too: its value enters the loop
    assert _kept([a, b], [_use(a), _loop(_read(a), _use(a), _use(b), _read(b))]) == ["a", "b"]


def _kept_also(buffers, body) -> list[tuple[str, tuple]]:
    program = reuse_buffers(_Target(), _program(buffers, body))
    return [(b.sym.name, tuple(t.name for t in b.also)) for b in program.kernel.buffers]


def test_an_elementwise_statement_computes_a_tile_over_the_one_it_reads_last():
    x, y = _buf("x", holds=X), _buf("y", holds=Y)
    assert _kept_also([x, y], [_use(x), _map(x, y), _read(y)]) == [("x", ("Y",))]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # inside a loop whose trips write x first
    assert _kept_also([x, y], [_loop(_use(x), _map(x, y), _read(y))]) == [("x", ("Y",))]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # a read of another element: not in place
    assert _kept_also([x, y], [_use(x), _map(x, y, shift=1), _read(y)]) == [("x", ()), ("y", ())]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # x read after: it must keep its values
    assert _kept_also([x, y], [_use(x), _map(x, y), _read(x), _read(y)]) == [("x", ()), ("y", ())]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # x written before the loop: each trip reads it again
    assert _kept_also([x, y], [_use(x), _loop(_map(x, y), _read(y))]) == [("x", ()), ("y", ())]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # (a loop of one statement: its span is that statement's)
    assert _kept_also([x, y], [_use(x), _loop(_map(x, y)), _read(y)]) == [("x", ()), ("y", ())]
    x, y = _buf("x", holds=X), _buf("y", holds=Y)  # every trip stores one element: a later trip would read it changed
    assert _kept_also([x, y], [_use(x), _map(x, y, at=Const(0)), _read(y)]) == [("x", ()), ("y", ())]
    x, y = _buf("x", holds=X), _buf("y", holds=Y, dtype="float16")  # other types
    assert _kept_also([x, y], [_use(x), _map(x, y), _read(y)]) == [("x", ()), ("y", ())]


def _run(body, pick_then: bool) -> list:
    """What each read sees, in order: the last value written into its buffer (a write's id), or None. Loops run twice
    (a value may pass from one trip to the next); a guarded program runs one of its versions."""
    held, seen = {}, []

    def go(stmts):
        for s in stmts:
            if isinstance(s, ir.For):
                go(s.body)
                go(s.body)
            elif isinstance(s, ir.Guarded):
                go(s.then if pick_then else s.otherwise)
            elif isinstance(s, ir.Fill):
                held[s.dst] = s.value
            elif isinstance(s, ir.LeafCall):  # an elementwise map: garbage in, garbage out
                src = held.get(s.expr.args[0].of)
                held[s.store.of] = None if src is None else ("map", src)
            else:
                seen.append(held.get(s.src.of))
    go(body)
    return seen


def _programs():
    """Random nests of loops and guarded versions over writes, reads and maps of four alike buffers, two tiles of
    each of two tensors."""
    pool = st.integers(0, 3)
    leaf = st.one_of(st.tuples(st.just("w"), pool), st.tuples(st.just("r"), pool), st.tuples(st.just("m"), pool, pool))
    return st.recursive(st.lists(leaf, min_size=1, max_size=4),
                        lambda inner: st.lists(st.one_of(leaf, st.tuples(st.just("loop"), inner),
                                                         st.tuples(st.just("guard"), inner, inner)), min_size=1, max_size=4),
                        max_leaves=14)


@settings(max_examples=300, **SETTINGS)
@given(shape=_programs())
def test_every_read_sees_what_it_saw_before_the_buffers_were_shared(shape):
    bufs = [_buf(f"b{k}", holds=X if k < 2 else Y) for k in range(4)]
    writes = iter(range(1, 10_000))

    def build(items):
        out = []
        for item in items:
            if item[0] == "w":
                out.append(ir.Fill(bufs[item[1]].sym, float(next(writes)), WHY))
            elif item[0] == "r":
                out.append(_read(bufs[item[1]]))
            elif item[0] == "m":
                out.append(_map(bufs[item[1]], bufs[item[2]]))
            elif item[0] == "loop":
                out.append(_loop(*build(item[1])))
            else:
                out.append(ir.Guarded(fresh("n"), 64, tuple(build(item[1])), tuple(build(item[2])), WHY))
        return out

    body = build(shape)
    program = reuse_buffers(_Target(), _program(bufs, body))
    for pick in (True, False):
        before, after = _run(tuple(body), pick), _run(program.kernel.body, pick)
        # (a read before any write of its buffer reads garbage either way: no program the stager makes has one)
        assert [a for a, b in zip(after, before) if b is not None] == [b for b in before if b is not None]


def test_a_target_without_the_key_keeps_every_buffer():
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_use(a), _use(b)], target=type("T", (), {"reuse_buffers": False})()) == ["a", "b"]


def test_a_buffer_no_statement_names_is_dropped():
    a, b = _buf("a"), _buf("b")
    program = drop_unused_buffers(_program([a, b], [_use(a)]))
    assert [x.sym.name for x in program.kernel.buffers] == ["a"]
    same = _program([a], [_use(a)])
    assert drop_unused_buffers(same) is same


def test_softmax_rows_leave_the_tile_of_exps_unallocated():
    from septran.ops.logic import softmax as logic
    kernel = septran.compile(logic.softmax(False), mapping_file="mappings/cpu/softmax.yaml")
    src = kernel.specialize(X=((8, 300), "float32")).tilelang_source
    assert "S = T.alloc" not in src and "m = T.alloc_local" in src


@pytest.mark.build
@pytest.mark.parametrize("dtype,cols", [(torch.bfloat16, 70_001), (torch.float16, 70_001), (torch.bfloat16, 300_007)],
                         ids=["bf16", "fp16", "bf16-walked"])
def test_a_16_bit_vocabulary_row_lives_in_one_buffer(dtype, cols):
    from septran.ops.logic import softmax as logic
    kernel = septran.compile(logic.softmax(False), mapping_file="mappings/cpu/softmax.yaml")
    x = (3 * torch.randn(3, cols, generator=torch.Generator().manual_seed(70))).to(dtype)
    out = kernel(x)
    src = kernel.latest.tilelang_source
    allocs = [line.strip() for line in src.splitlines() if "T.alloc_local((BM, BN)" in line]
    assert "BN = 262128" in src and allocs == ['X_local = T.alloc_local((BM, BN), "float32")  # then Y\'s, computed in place']
    assert ("for k in T.serial" in src) == (cols > 262128)
    assert_flash_rule(out, torch.softmax(x.double(), -1), torch.softmax(x, -1), f"3x{cols} {dtype}")
