"""Elementwise loops over a staged tile that overhangs its tensor, over its in-bounds part (lowering/clip_staged.py).

A row of 1500 in a 4104-wide LOCAL tile: the exps and the scaling of a bfloat16 softmax ran over 4104 elements
(its mapping now gives 16-bit rows 65536-wide tiles, which the loops make no slower).
Checked: the programs' text (the loops over ``T.min(BN, ...)``, the in-place reads along them unguarded); a tile
with a reader that reads past its end (a temp over the whole tile) keeps its whole loop; the results under the
FlashAttention rule on rows that overhang the tile and rows that fill it; targets without the key.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import septran
from conftest import REPO, assert_flash_rule, edited_mapping
from septran import task
from septran.target import load_target
from test_cpu_vendor import SETTINGS


def _source(op: str, logic, shapes: dict) -> str:
    kernel = septran.compile(logic, mapping_file=f"mappings/cpu/{op}.yaml")
    return kernel.specialize(**shapes).tilelang_source


def _loops(src: str) -> list[str]:
    return [line.strip() for line in src.splitlines() if "in T.grid(" in line]


def test_a_softmax_row_past_the_tile_loops_over_the_row():
    from septran.ops.logic import softmax as logic
    src = _source("softmax", logic.softmax(False), {"X": ((7, 1500), "bfloat16")})
    assert "BN = 65536" in src  # every 16-bit softmax row up to 65536 in one tile (mappings/cpu/softmax.yaml)
    wide = [loop for loop in _loops(src) if "b in" in loop]
    assert wide == ["for a, b in T.grid(BM, T.min(BN, X_dim1)):"] * 2  # the exps and the scaling


def test_explain_says_which_loops_run_over_the_in_bounds_part():
    from septran.ops.logic import softmax as logic
    kernel = septran.compile(logic.softmax(False), mapping_file="mappings/cpu/softmax.yaml")
    text = kernel.specialize(X=((7, 1500), "bfloat16")).explain()
    assert text.count("over (BM, min(BN, X_dim1)) of the tile: its in-bounds part (clip_staged.py)") == 2


def test_a_norm_reads_its_weights_in_place_unguarded():
    from septran.ops.logic import layernorm as logic
    # a float32 weight and a bfloat16 bias beside bfloat16 rows: staged rows, the weight in place (rows whose
    # weight and bias share a type, theirs or float32, go through the vendor's row_affine instead, which takes the
    # row's extent)
    src = _source("layernorm", logic.layernorm_logic, {"X": ((7, 1500), "bfloat16"), "W": ((1500,), "float32"),
                                                      "B": ((1500,), "bfloat16")})
    assert "for i, j in T.grid(T.min(BM, X_dim0 - bx * BM), T.min(BN, X_dim1)):" in _loops(src)  # 7 rows in 4s
    assert "T.if_then_else(j < X_dim1" not in src  # the loop keeps every read inside the row


# A logic whose staged output Y is read past its end: a temp over the whole tile masks it and sums it.
@task.define(leaf=True)
def _exps(Y, X):
    task.compute(Y, lambda i, j: task.exp(X[i, j]))


@task.define(leaf=True)
def _masked_sum(S, T, Y):
    task.compute(T, lambda i, j: task.where(task.global_index(Y, 1, j) < task.global_size(Y, 1), Y[i, j], 0.0))
    task.call_primitive("row_sum", S, T)


@task.define(leaf=True)
def _row_sum(S, Y):
    task.call_primitive("row_sum", S, Y)


def _logic(masked: bool):
    @task.define
    def exp_rows(Y, S, X):
        if masked:
            T = task.temp("BM", "BN")
            task.launch(_exps, Y, X)
            task.launch(_masked_sum, S, T, Y)
        else:
            task.launch(_exps, Y, X)
            task.launch(_row_sum, S, Y)

    @task.define
    def exp_host(Y, S, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
        Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
        Sp = task.partition(S, by="blocks", tile=("BM",))
        for i, j in task.parallel_range(Yp.shape):  # one column tile: the rows are shorter than BN
            task.launch(exp_rows, Yp[i, j], Sp[i], Xp[i, j])

    return exp_host


MAPPING = """target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: exp_host
    proc: HOST
    mems: {Y: GLOBAL, S: GLOBAL, X: GLOBAL}
    tunables: {BM: 2, BN: 64}
    calls: {exp_rows: rows}
  rows:
    task_name: exp_rows
    proc: BLOCK
    mems: {Y: LOCAL, S: LOCAL, X: LOCAL%s}
    leaf_task_bindings: {%s}
"""


def _kernel(tmp_path, masked: bool):
    path = tmp_path / "exps.yaml"
    path.write_text(MAPPING % ((", T: LOCAL", "_exps: vector_loops, _masked_sum: vector_loops") if masked
                               else ("", "_exps: vector_loops, _row_sum: vector_loops")))
    return septran.compile(_logic(masked), mapping_file=path)


@pytest.mark.parametrize("masked", [False, True], ids=["summed_in_bounds", "read_past_the_end"])
def test_only_a_tile_whose_readers_stay_inside_is_clipped(tmp_path, masked):
    src = _kernel(tmp_path, masked).specialize(X=((5, 40), "float32")).tilelang_source
    exps = next(loop for loop in _loops(src) if "= T.exp(" in src.split(loop)[1].splitlines()[1])
    assert exps.endswith("T.grid(BM, BN):" if masked else "T.grid(T.min(BM, X_dim0 - by * BM), T.min(BN, X_dim1 - bx * BN)):")


@pytest.mark.build
@pytest.mark.parametrize("masked", [False, True], ids=["summed_in_bounds", "read_past_the_end"])
def test_the_results_are_right_either_way(tmp_path, masked):
    kernel = _kernel(tmp_path, masked)
    gen = torch.Generator().manual_seed(3)
    for rows, cols in ((5, 40), (4, 64), (3, 1)):  # overhanging rows and columns, a whole tile, one column
        x = torch.randn(rows, cols, generator=gen)
        y, s = kernel(x)
        assert_flash_rule(y, x.double().exp(), x.exp(), f"exp {rows}x{cols}")
        assert_flash_rule(s, x.double().exp().sum(1), x.exp().sum(1), f"sum {rows}x{cols}")


# The norms with dynamic columns in 256-wide staged tiles, BM 3: one build per operator serves rows inside one tile
# (the one-tile version, clipped), rows that walk tiles (the last one clipped), and blocks of rows past the end.
NORM_EDITS = (("target: cpu\n", "target: cpu\ndynamic: {X: [0, 1]}\n"), ("BN: 1024", "BN: 256"), ("BM: 1,", "BM: 3,"))
STAGED = {"layernorm": ("{Y: GLOBAL, X: GLOBAL, W: GLOBAL, B: GLOBAL, mean:", "{Y: LOCAL, X: LOCAL, W: LOCAL, B: LOCAL, mean:"),
          "rmsnorm": ("{Y: GLOBAL, X: GLOBAL, W: GLOBAL, rstd:", "{Y: LOCAL, X: LOCAL, W: LOCAL, rstd:")}
_NORMS: dict = {}


def _norm(tmp_path_factory, op: str):
    if op not in _NORMS:
        from septran.ops.logic import layernorm, rmsnorm
        path = edited_mapping(tmp_path_factory.mktemp("clip"), "cpu", op, *NORM_EDITS, STAGED[op])
        _NORMS[op] = septran.compile(layernorm.layernorm_logic if op == "layernorm" else rmsnorm.rmsnorm_logic,
                                     mapping_file=path)
    return _NORMS[op]


@pytest.mark.build
@settings(max_examples=24, **SETTINGS)
@given(op=st.sampled_from(["layernorm", "rmsnorm"]), dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       rows=st.integers(1, 8), cols=st.integers(1, 3 * 256 + 9), seed=st.integers(0, 2 ** 16))
def test_norms_of_any_width_are_right(tmp_path_factory, op, dtype, rows, cols, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=gen) * 3 + torch.randn(rows, 1, generator=gen)).to(dtype)
    w, b = (torch.randn(cols, generator=gen).to(dtype) for _ in range(2))
    kernel = _norm(tmp_path_factory, op)
    if op == "layernorm":
        out, fn = kernel(x, w, b), lambda *t: F.layer_norm(t[0], (cols,), t[1], t[2], 1e-5)
        args = (x, w, b)
    else:
        out, fn = kernel(x, w), lambda *t: F.rms_norm(t[0], (cols,), t[1], 1e-6)
        args = (x, w)
    assert_flash_rule(out, fn(*(t.double() for t in args)), fn(*args), f"{op} {rows}x{cols} {dtype}")


@pytest.mark.parametrize("value", ["maybe", "1", "[true]"])
def test_a_targets_flag_is_true_or_false(tmp_path, value):
    """target.yaml's yes / no keys take true or false: "maybe" had read as true."""
    from septran.target import TargetError, load_target_file
    text = (REPO / "backends" / "cpu" / "target.yaml").read_text()
    (tmp_path / "target.yaml").write_text(text.replace("clip_staged_loops: true", f"clip_staged_loops: {value}"))
    with pytest.raises(TargetError, match=r"clip_staged_loops is true or false, got") as info:
        load_target_file(tmp_path / "target.yaml")
    assert ":" in str(info.value.loc)  # at the key's line


def test_only_the_cpu_asks():
    asked = {name: load_target(name).clip_staged_loops for name in ("cpu", "sm80", "sm90", "gfx942")}
    assert asked == {"cpu": True, "sm80": False, "sm90": False, "gfx942": False}
