"""Buffers a program never names are not allocated (lowering/unused_buffers.py), and tiles of one tensor whose
lives do not overlap share one buffer (lowering/reuse_buffers.py).

Checked: the lives' rules on hand-made programs (statements one after another share; uses inside one loop, or a
loop and a statement inside it, do not; a use inside a loop spans the loop; the two versions of a guarded program
share; tiles of different tensors, temps, other shapes or types never share; a target without the key keeps
every buffer); the shipped softmax: its unused tile of exps gone, a 16-bit row walked in 65536-wide tiles staged
in one X and one Y buffer (five before, 1.25 MiB, over the stack's 1 MiB), right under the FlashAttention rule.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import septran
from conftest import assert_flash_rule
from septran.expr import Const, fresh
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


def test_tiles_of_one_tensor_one_after_another_share():
    a, b, c = _buf("a"), _buf("b"), _buf("c")
    assert _kept([a, b, c], [_loop(_use(a)), _loop(_use(b)), _use(c)]) == ["a"]


def test_lives_that_overlap_do_not_share():
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_loop(_use(a), _use(b))]) == ["a", "b"]  # one loop: each trip uses both
    a, b = _buf("a"), _buf("b")
    assert _kept([a, b], [_use(a), _use(b), _use(a)]) == ["a", "b"]  # b between two uses of a


def test_a_use_inside_a_loop_spans_the_outermost_loop():
    a, b = _buf("a"), _buf("b")  # a read in a later trip of the outer loop must still hold its value
    assert _kept([a, b], [_loop(_loop(_use(a)), _loop(_use(b)))]) == ["a", "b"]
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
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_16_bit_row_walked_in_wide_tiles_stages_one_buffer_per_tensor(dtype):
    from septran.ops.logic import softmax as logic
    kernel = septran.compile(logic.softmax(False), mapping_file="mappings/cpu/softmax.yaml")
    x = (3 * torch.randn(3, 70_001, generator=torch.Generator().manual_seed(70))).to(dtype)
    out = kernel(x)
    src = kernel.latest.tilelang_source
    allocs = [line.strip().split(" =")[0] for line in src.splitlines() if "T.alloc_local((BM, BN)" in line]
    assert "BN = 65536" in src and allocs == ["X_local", "Y_local"]
    assert_flash_rule(out, torch.softmax(x.double(), -1), torch.softmax(x, -1), f"3x70001 {dtype}")
