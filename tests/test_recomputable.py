"""``task.recomputable(Y[i, j], value)``: an element read where it holds ``value`` exactly, computed again elsewhere.

A 16-bit softmax row walked in tiles stored its exps to Y and scaled them read back: rounded twice, past the
FlashAttention rule (septran/lowering/recomputed.py). Checked: the logic's misuse refused at its line; which side
the lowering reads (a float32 tensor or a buffer the values stayed in: the stored element; a 16-bit tensor or a
buffer copied from one: the value, and no copy in of what nobody reads); the results under the FlashAttention
rule, float32, bfloat16 and float16, in place and staged, rows in one tile and walking several; softmax over a
matrix's rows and over its columns.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import septran
from conftest import assert_flash_rule, edited_mapping
from septran import task
from septran.errors import FrontendError
from septran.frontend.graph import build_graph
from test_cpu_vendor import SETTINGS


@task.define(leaf=True)
def _exps(Y, X):
    task.compute(Y, lambda i, j: task.exp(X[i, j]))


@task.define(leaf=True)
def _scaled(Y, X):  # Y holds exp(X): read where it holds it exactly
    task.compute(Y, lambda i, j: task.recomputable(Y[i, j], task.exp(X[i, j])) * 0.7)


@task.define
def _walks(Y, X):  # a block of rows: the exps over every column tile, then scaled
    Yp = task.partition(Y, by="blocks", tile=(None, "BN"))
    Xp = task.partition(X, by="blocks", tile=(None, "BN"))
    for k in task.range(Xp.shape[1]):
        task.launch(_exps, Yp[0, k], Xp[0, k])
    for k in task.range(Xp.shape[1]):
        task.launch(_scaled, Yp[0, k], Xp[0, k])


@task.define
def _host(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", None))
    Xp = task.partition(X, by="blocks", tile=("BM", None))
    for i in task.parallel_range(Yp.shape[0]):
        task.launch(_walks, Yp[i, 0], Xp[i, 0])


MAPPING = """target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: _host
    proc: HOST
    mems: {Y: GLOBAL, X: GLOBAL}
    tunables: {BM: 2, BN: 64}
    calls: {_walks: rows}
  rows:
    task_name: _walks
    proc: BLOCK
    mems: {Y: %(mem)s, X: %(mem)s}
    leaf_task_bindings: {_exps: vector_loops, _scaled: vector_loops}
%(keep)s"""

_KERNELS: dict = {}


def _kernel(mem: str, keep: bool):
    """One build per (memory, bfloat16 kept as bits or converted to float32 by the runtime); float16 is the cpu's
    own type either way (in place only where bfloat16 is converted: the cpu refuses loops over bits)."""
    if (mem, keep) not in _KERNELS:
        text = MAPPING % {"mem": mem, "keep": "keep_dtypes: [bfloat16]\n" if keep else ""}
        _KERNELS[mem, keep] = septran.compile(_host, mapping=text)
    return _KERNELS[mem, keep]


def test_the_stored_element_must_be_a_tile_element():
    @task.define(leaf=True)
    def bad(Y, X):
        task.compute(Y, lambda i, j: task.recomputable(2.0, task.exp(X[i, j])))

    @task.define
    def entry(Y, X):
        task.launch(bad, Y, X)

    with pytest.raises(FrontendError, match="first argument is a tile's element") as err:
        build_graph(entry)
    assert "test_recomputable.py" in str(err.value)


@pytest.mark.parametrize("mem,keep,dtype,cols,exps,y_loads", [
    ("GLOBAL", False, "float32", 200, 1, 0),  # in place, float32: the stored exps are read
    ("LOCAL", False, "float32", 200, 1, 1),  # walking, float32 tiles loaded back: exact
    ("LOCAL", True, "bfloat16", 200, 2, 0),  # walking, loaded back from bfloat16: recomputed, Y never loaded
    ("LOCAL", True, "bfloat16", 50, 1, 0),  # one tile: the exps stay in the float32 buffer
    ("GLOBAL", False, "bfloat16", 200, 1, 0),  # converted by the runtime: the program's Y is float32
    ("GLOBAL", False, "float16", 50, 2, 0),  # in place in float16 (the cpu's own type), even in one tile
])
def test_the_lowering_reads_the_stored_element_only_where_it_is_exact(mem, keep, dtype, cols, exps, y_loads):
    program = _kernel(mem, keep).specialize(X=((5, cols), dtype))
    src = program.tilelang_source
    assert src.count("T.exp(") == exps, src
    said = "Y's value computed again (what it holds here was rounded)" if exps == 2 else "Y read (it holds the value"
    assert f"recomputable: {said}" in program.explain()  # explain() says which side
    assert sum("septran_cpu_load" in line and "Y.access_ptr" in line for line in src.splitlines()) == y_loads, src


@pytest.mark.build
@settings(max_examples=12, **SETTINGS)
@given(case=st.sampled_from([("GLOBAL", False), ("LOCAL", False), ("LOCAL", True)]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       rows=st.integers(1, 5), cols=st.integers(1, 200), seed=st.integers(0, 2 ** 16))
def test_the_scaled_exps_are_rounded_once(case, dtype, rows, cols, seed):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).to(dtype)
    y = _kernel(*case)(x)
    once = (x.float().exp() * 0.7).to(dtype)
    assert_flash_rule(y, x.double().exp() * 0.7, once, f"{case} {rows}x{cols} {dtype}")
    if dtype != torch.float32:  # (float32: the exps' last bits differ from torch's)
        _rounded_once(y, once)


def _rounded_once(out, once):
    """``out`` as the float32 result rounded once: a few elements off by the exps' last float32 bit (none of 64x200
    here), where rounded twice a sixth to a quarter of them differed."""
    assert (out != once).double().mean().item() <= 0.01


@pytest.mark.build
@pytest.mark.parametrize("axis", [0, 1], ids=["columns", "rows"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_softmax_walking_its_tiles_rounds_once(tmp_path, axis, dtype):
    """Staged in 128-wide tiles: a 16-bit softmax over 300 or 301 elements walks three, and over a matrix's columns
    too (the exps go to Y through a temp there)."""
    from septran.ops.logic import softmax as logic
    path = edited_mapping(tmp_path, "cpu", "softmax", ("BN: 1024", "BN: 128"),
                          ("mems: {Y: GLOBAL, X: GLOBAL, m:", "mems: {Y: LOCAL, X: LOCAL, m:"))
    kernel = septran.compile(logic.softmax(False, axis, 2).alternatives["softmax_cached_logic"], mapping_file=path)
    gen = torch.Generator().manual_seed(7)
    for shape in ((3, 301), (301, 2)) if axis == 1 else ((300, 3), (2, 5)):
        x = (torch.randn(*shape, generator=gen) * torch.rand(shape[1 - axis], generator=gen).unsqueeze(axis) * 20)
        x, once = x.to(dtype), torch.softmax(x.to(dtype).float(), axis).to(dtype)
        out = kernel(x)
        assert_flash_rule(out, torch.softmax(x.double(), axis), torch.softmax(x, axis), f"{shape} axis {axis}")
        _rounded_once(out, once)
