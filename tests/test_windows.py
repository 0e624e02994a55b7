"""Windows: tiles at element offsets (task.window, task.partition(..., by="windows")) as primitive operands.

A 1-D convolution over rows, Y[m, n] = sum_t X[m + t, :] @ W[t, :, n], reads for each tap t the window of
X that starts t rows below the output tile: correct where it stays in bounds (or runs past X's end, read
as 0 there), refused by the verification with the numbers where it would start before 0, lie wholly past
the end, or leave the tile it is cut from.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import septran

LOGIC = '''
from septran import task


@task.define(leaf=True)
def rows_leaf(Y, X, W):
    task.call_primitive("gemm", Y, X, W)


@task.define
def rows_block(Y, X, W):
    m = task.global_offset(Y, 0)
    Wp = task.partition(W, by="blocks", tile=(1, None, None))
    Xw = task.partition(X, by="windows", tile=("BM", None))
    for t in task.range(W.shape[0]):
        task.launch(rows_leaf, Y, {WINDOW}, Wp[t, 0, 0])


@task.define
def rows_host(Y, X, W):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Wp = task.partition(W, by="blocks", tile=(None, None, "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(rows_block, Yp[i, j], {X_ARG}, Wp[0, 0, j])
'''

MAPPING = '''
target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: rows_host
    proc: HOST
    mems: {{Y: GLOBAL, X: GLOBAL, W: GLOBAL}}
    tunables: {{BM: {BM}, BN: 16}}
    calls: {{rows_block: blk}}
  blk:
    task_name: rows_block
    proc: BLOCK
    mems: {{Y: LOCAL, X: {MEM}, W: {MEM}}}
    leaf_task_bindings: {{rows_leaf: {LEAF}}}
'''


def _kernel(tmp_path, window="Xw[m + t, 0]", x_arg="X", bm=8, local=False):
    logic = tmp_path / "rows_conv.py"
    logic.write_text(LOGIC.replace("{WINDOW}", window).replace("{X_ARG}", x_arg))
    mapping = tmp_path / "rows_conv.yaml"
    mapping.write_text(MAPPING.format(BM=bm, MEM="LOCAL" if local else "GLOBAL",
                                      LEAF="gemm_leaf_cpu" if local else "gemm_leaf_blas"))
    return septran.compile(logic_file=logic, mapping_file=mapping)


def _run(kernel, x, w, rows):
    y = torch.full((rows, w.shape[2]), float("nan"), dtype=x.dtype)
    kernel.specialize(X=x, W=w, Y=y).build()(x, w, y)
    return y


def _reference(x, w, rows):
    xp = torch.cat([x.double(), torch.zeros(rows + w.shape[0], x.shape[1], dtype=torch.float64)])  # past the end: 0
    return sum(xp[t:t + rows] @ w[t].double() for t in range(w.shape[0]))


@settings(max_examples=6, deadline=None, derandomize=True)
@given(rows=st.integers(1, 40), k=st.integers(1, 9), n=st.integers(1, 20), taps=st.integers(1, 5),
       bm=st.sampled_from([4, 8, 16]), local=st.booleans())
@pytest.mark.build
def test_windows_in_bounds_match_torch(tmp_path_factory, rows, k, n, taps, bm, local):
    gen = torch.Generator().manual_seed(rows * 7 + k)
    x = torch.randn(rows + taps - 1, k, generator=gen)
    w = torch.randn(taps, k, n, generator=gen)
    y = _run(_kernel(tmp_path_factory.mktemp("w"), bm=bm, local=local), x, w, rows)
    assert torch.allclose(y.double(), _reference(x, w, rows), atol=1e-4)


@pytest.mark.parametrize("local", [False, True], ids=["in_place", "staged"])
@pytest.mark.build
def test_a_window_that_divides_its_tensor_still_overhangs_its_end(tmp_path, local):
    """16 rows, windows of 8 starting at 8 + t: the rows past the end read as 0, in place and staged alike
    (a tile's offset is a multiple of its size, a window's is not: the guard comes from the offset's bounds)."""
    x, w = torch.randn(16, 5), torch.randn(3, 5, 7)
    y = _run(_kernel(tmp_path, local=local), x, w, 16)  # Y larger than 16 - 3 + 1: its last rows see the zeros
    assert torch.allclose(y.double(), _reference(x, w, 16), atol=1e-4)
    src = _kernel(tmp_path, local=local).specialize(X=x, W=w, Y=y).tilelang_source
    assert "T.min(BM, X_dim0 - (by * BM + t))" in src  # the window's in-bounds rows, though 8 divides 16


def test_a_window_before_the_start_is_refused(tmp_path):
    kernel = _kernel(tmp_path, window="Xw[m + t - 1, 0]")
    with pytest.raises(septran.LoweringError, match=r"window start m \+ t - 1|reaches -1.*before the start of X") as info:
        kernel.specialize(X=((20, 4), "float32"), W=((3, 4, 8), "float32"), Y=((18, 8), "float32"))
    assert "reaches -1" in str(info.value) and "rows_conv.py" in str(info.value)


def test_a_window_wholly_past_the_end_is_refused(tmp_path):
    """An output 8 rows too long: its last tile's windows would start at row 20 of a 20-row X."""
    with pytest.raises(septran.LoweringError, match=r"reaches 2[0-9].*X has 20 elements along dimension 0") as info:
        _kernel(tmp_path).specialize(X=((20, 4), "float32"), W=((3, 4, 8), "float32"), Y=((26, 8), "float32"))
    assert "wholly past its end" in str(info.value)


def test_a_window_leaving_its_tile_is_refused(tmp_path):
    """A window of a tile may not reach the tile's neighbours."""
    logic = LOGIC.replace("{WINDOW}", "Xw[t, 0]").replace("{X_ARG}", "Xp[i, 0]").replace(
        "    for i, j in", '    Xp = task.partition(X, by="blocks", tile=("BM", None))\n    for i, j in')
    (tmp_path / "rows_conv.py").write_text(logic)
    (tmp_path / "m.yaml").write_text(MAPPING.format(BM=8, MEM="GLOBAL", LEAF="gemm_leaf_blas"))
    kernel = septran.compile(logic_file=tmp_path / "rows_conv.py", mapping_file=tmp_path / "m.yaml")
    with pytest.raises(septran.LoweringError, match=r"window of 8 elements starting at t reaches element 9.*tile of 8"):
        kernel.specialize(X=((24, 4), "float32"), W=((3, 4, 8), "float32"))


def test_the_grid_may_not_write_windows(tmp_path):
    logic = LOGIC.replace("{WINDOW}", "Xw[m + t, 0]").replace("{X_ARG}", "X").replace(
        "Yp[i, j], X,", 'task.window(Y, start=(i, 0), shape=("BM", "BN")), X,')
    (tmp_path / "rows_conv.py").write_text(logic)
    (tmp_path / "m.yaml").write_text(MAPPING.format(BM=8, MEM="GLOBAL", LEAF="gemm_leaf_blas"))
    kernel = septran.compile(logic_file=tmp_path / "rows_conv.py", mapping_file=tmp_path / "m.yaml")
    with pytest.raises(septran.SepTranError, match="windows of Y"):
        kernel.specialize(X=((20, 4), "float32"), W=((3, 4, 16), "float32"), Y=((18, 16), "float32"))


def test_an_output_tied_to_no_input_needs_its_shape(tmp_path):
    """Windows tie no extents (18 = 20 - 3 + 1 is no equality): Y's rows come from the caller."""
    kernel = _kernel(tmp_path)
    with pytest.raises(septran.CallError, match="cannot tell the shape of output Y: its dimension 0 is tied to no input"):
        kernel(torch.randn(20, 4), torch.randn(3, 4, 16))


@pytest.mark.parametrize("window, message", [
    ('task.window(X, start=(m + t, 1), shape=("BM", None))', "starts at 0 there, not at 1"),
    ('task.window(X, start=(m + t,), shape=("BM", None))', "one entry per dimension"),
    ('Xw[m + t, :]', None),  # `:` where the window spans the dimension: fine
    ('Xw[:, 0]', "give the element it starts at"),
])
def test_window_spellings(tmp_path, window, message):
    kernel = _kernel(tmp_path, window=window) if message is None else None
    if message is None:
        kernel.specialize(X=((20, 4), "float32"), W=((3, 4, 16), "float32"), Y=((18, 16), "float32"))
        return
    with pytest.raises(septran.FrontendError, match=message) as info:
        _kernel(tmp_path, window=window)
    assert "rows_conv.py" in str(info.value)
