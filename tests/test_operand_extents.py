"""Operands of different extents (issue 23, item 4), against torch on odd shapes.

The rule (frontend/compute_operands.py): a compute's plain index shared by two tiles ties their extents (einsum);
a dimension read at an offset, a constant, or at a plain index inside a guard on it
(``task.where(task.global_index(M, 1, j) < task.global_size(M, 1), M[i, j], 0.0)``) ties nothing, and the verify
pass proves every read of it in the tile or refuses at the compute's line. So a valid-mode stencil writes a
narrower output, RoPE reads half-width tables, and a mask shorter than the keys is read padded by its guard;
a plain, unguarded read of a shorter tile is refused at the call with the guard as the hint.
"""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

import septran
from septran import task
from conftest import REPO, assert_flash_rule, load_module, mapping_path
from support.rows import rows_logic, rows_mapping

HERE = __file__
NEG_INF = float("-inf")


def _line(fn, marker: str = "task.compute") -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, text in enumerate(lines) if marker in text)


def _rand(*shape, seed: int):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- valid-mode stencils --------------------------------------------------------------------------------------

@task.define(leaf=True)
def diff(Y, X):
    task.compute(Y, lambda i, j: X[i, j + 1] - X[i, j])


@task.define(leaf=True)
def taps(Y, X):  # three taps, no padding: Y is two columns narrower than X
    task.compute(Y, lambda i, j: X[i, j] + 2.0 * X[i, j + 1] - X[i, j + 2])


@pytest.fixture(scope="module")
def diff_kernel():
    return septran.compile(rows_logic(diff), mapping=rows_mapping("diff", 4))


@pytest.mark.build
def test_valid_mode_stencil_writes_a_narrower_output(diff_kernel):
    x = _rand(7, 11, seed=1)
    y = diff_kernel(x, Y=torch.empty(7, 10))
    torch.testing.assert_close(y, x[:, 1:] - x[:, :-1], rtol=0, atol=0)
    three = septran.compile(rows_logic(taps), mapping=rows_mapping("taps", 3))
    x = _rand(5, 13, seed=2)
    y = three(x, Y=torch.empty(5, 11))
    torch.testing.assert_close(y, x[:, :-2] + 2 * x[:, 1:-1] - x[:, 2:])


@pytest.mark.build
def test_a_shorter_output_reads_only_what_it_needs(diff_kernel):
    """Y of 4 columns from an X of 11: the offset read ties nothing, and every read is proved inside X's row."""
    x = _rand(9, 11, seed=3)
    torch.testing.assert_close(diff_kernel(x, Y=torch.empty(9, 4)), x[:, 1:5] - x[:, :4], rtol=0, atol=0)


def test_an_allocated_output_takes_the_input_width_and_the_read_past_it_is_refused(diff_kernel):
    """Nothing ties Y's width, so an allocated Y takes X's (the read beside it); X[i, j + 1] then leaves the row."""
    with pytest.raises(septran.LoweringError) as info:
        diff_kernel.specialize(X=((5, 13), "float32"))
    err = info.value
    assert (err.loc.file, err.loc.line) == (HERE, _line(diff)), str(err)
    assert "X[i, j + 1] reads X at 1..13 along dimension 1 (j runs over 0..12)" in str(err)
    assert "narrower output" in err.hint, err.hint


def test_an_output_wider_than_the_stencil_reaches_is_refused(diff_kernel):
    with pytest.raises(septran.LoweringError) as info:
        diff_kernel(_rand(7, 11, seed=4), Y=torch.empty(7, 11))
    assert info.value.loc.line == _line(diff) and "holds 11 elements there (0..10)" in str(info.value)


# -- RoPE with half-width tables ------------------------------------------------------------------------------

@task.define(leaf=True)
def rope_rows(Y, X, C, S):
    """Llama's tables: cos and sin of width D / 2, applied to both halves (rotate_half's form)."""
    half = X.shape[3] // 2
    task.compute(Y, lambda b, s, h, j: task.where(
        task.global_index(X, 3, j) < half,
        X[b, s, h, j] * C[s, j] - X[b, s, h, j + half] * S[s, j],
        X[b, s, h, j] * C[s, j - half] + X[b, s, h, j - half] * S[s, j - half]))


@task.define
def rope_block(Y, X, C, S):
    task.launch(rope_rows, Y, X, C, S)


@task.define
def rope_logic(Y, X, C, S):
    Yp = task.partition(Y, by="blocks", tile=(1, "BS", None, None))
    Xp = task.partition(X, by="blocks", tile=(1, "BS", None, None))
    Cp = task.partition(C, by="blocks", tile=("BS", None))
    Sp = task.partition(S, by="blocks", tile=("BS", None))
    for b, s in task.parallel_range((Yp.shape[0], Yp.shape[1])):
        task.launch(rope_block, Yp[b, s, 0, 0], Xp[b, s, 0, 0], Cp[s, 0], Sp[s, 0])


def _half_tables(seq: int, dim: int):
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv)  # (seq, dim / 2)
    return angles.cos(), angles.sin()


def _rope_reference(x, cos, sin):
    """transformers' apply_rotary_pos_emb, with its full tables made from the half ones."""
    c, s = torch.cat((cos, cos), -1)[None, :, None, :], torch.cat((sin, sin), -1)[None, :, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
    return x * c + rotated * s


@pytest.fixture(scope="module")
def rope_kernel():
    return septran.compile(rope_logic, mapping_file=mapping_path("cpu", "rope"))


@pytest.mark.parametrize("batch,seq,heads,dim", [(2, 37, 3, 10), (1, 9, 5, 64)])
@pytest.mark.build
def test_rope_with_half_width_tables_matches_torch(rope_kernel, batch, seq, heads, dim):
    x = _rand(batch, seq, heads, dim, seed=seq).double()
    cos, sin = _half_tables(seq, dim)
    out = rope_kernel(x.float(), cos.float(), sin.float())
    assert out.shape == x.shape  # an allocated Y takes X's head dimension, not the tables'
    assert (out.double() - _rope_reference(x, cos, sin)).abs().max().item() < 1e-5


def test_rope_tables_too_narrow_are_refused_at_the_compute(rope_kernel):
    with pytest.raises(septran.LoweringError) as info:
        rope_kernel.specialize(X=((1, 9, 2, 10), "float32"), C=((9, 4), "float32"), S=((9, 4), "float32"))
    err = info.value
    assert (err.loc.file, err.loc.line) == (HERE, _line(rope_rows)), str(err)
    assert "reads C at" in str(err) and "holds 4 elements there (0..3)" in str(err)


# -- a mask shorter than the keys -----------------------------------------------------------------------------

def _masked_attention():
    """Attention over every key at once (a block of query rows of one head per program) with an additive mask M
    of Sm <= Sk keys, read under a guard: the keys past its end are hidden (-inf), as ONNX's Attention pads a
    short mask."""

    @task.define(leaf=True)
    def start(O, S, m):
        task.compute(O, lambda i, j: 0.0)
        task.compute(S, lambda i, j: 0.0)
        task.compute(m, lambda i: NEG_INF)

    @task.define(leaf=True)
    def scores(S, Q, K):
        task.call_primitive("gemm_bt", S, Q, K)  # S += Q K^T

    @task.define(leaf=True)
    def softmax(S, m, l, M, Q):
        scale = 1.0 / task.sqrt(task.maximum(task.global_size(Q, 3), 1.0))
        task.compute(S, lambda i, j: S[i, j] * scale + task.where(
            task.global_index(M, 3, j) < task.global_size(M, 3), M[i, j], NEG_INF))
        task.call_primitive("row_max", m, S)
        task.compute(S, lambda i, j: task.exp(S[i, j] - m[i]))
        task.call_primitive("row_sum", l, S)

    @task.define(leaf=True)
    def values(O, S, V):
        task.call_primitive("gemm", O, S, V)  # O += P V

    @task.define(leaf=True)
    def finish(O, l):
        task.compute(O, lambda i, j: O[i, j] / l[i])

    @task.define
    def masked_block(O, Q, K, V, M):
        S = task.temp(Q.shape[2], K.shape[2])
        m = task.temp(Q.shape[2])
        l = task.temp(Q.shape[2])
        task.launch(start, O, S, m)
        task.launch(scores, S, Q, K)
        task.launch(softmax, S, m, l, M, Q)
        task.launch(values, O, S, V)
        task.launch(finish, O, l)

    @task.define
    def masked_attention(O, Q, K, V, M):
        Op = task.partition(O, by="blocks", tile=(1, 1, "BM", None))
        Qp = task.partition(Q, by="blocks", tile=(1, 1, "BM", None))
        Kp = task.partition(K, by="blocks", tile=(1, 1, None, None))
        Vp = task.partition(V, by="blocks", tile=(1, 1, None, None))
        Mp = task.partition(M, by="blocks", tile=(1, 1, "BM", None))  # the whole of M's keys, however many
        for b, h, i in task.parallel_range(Op.shape[:3]):
            task.launch(masked_block, Op[b, h, i, 0], Qp[b, h, i, 0], Kp[b, h, 0, 0], Vp[b, h, 0, 0], Mp[b, h, i, 0])

    return masked_attention


MASKED_MAPPING = """
target: cpu
entrypoint: host
task_mappings:
  host:
    task_name: masked_attention
    proc: HOST
    mems: {O: GLOBAL, Q: GLOBAL, K: GLOBAL, V: GLOBAL, M: GLOBAL}
    tunables: {BM: 16}
    calls: {masked_block: blk}
  blk:
    task_name: masked_block
    proc: BLOCK
    mems: {O: LOCAL, Q: GLOBAL, K: GLOBAL, V: GLOBAL, M: GLOBAL, S: LOCAL, m: LOCAL, l: LOCAL}
    leaf_task_bindings: {start: vector_loops, scores: gemm_leaf_blas, softmax: vector_loops, values: gemm_leaf_blas,
                         finish: vector_loops}
"""


@pytest.fixture(scope="module")
def masked_kernel():
    return septran.compile(_masked_attention(), mapping=MASKED_MAPPING)


@pytest.mark.parametrize("b, h, sq, sk, sm, d", [(2, 3, 37, 70, 53, 16), (1, 2, 19, 45, 45, 8), (1, 1, 5, 33, 1, 8)])
@pytest.mark.build
def test_a_mask_shorter_than_the_keys_is_padded_by_its_guard(masked_kernel, b, h, sq, sk, sm, d):
    kernel = masked_kernel
    q, k, v = _rand(b, h, sq, d, seed=1), _rand(b, h, sk, d, seed=2), _rand(b, h, sk, d, seed=3)
    m = _rand(b, h, sq, sm, seed=4) * 2
    out = kernel(q, k, v, m)
    full = F.pad(m, (0, sk - sm), value=NEG_INF)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=full.double())
    assert_flash_rule(out, ref, F.scaled_dot_product_attention(q, k, v, attn_mask=full), f"mask of {sm} of {sk} keys")


LIBRARY = load_module(REPO / "examples" / "attention" / "attention.py")


def test_the_library_attention_refuses_a_short_mask_with_the_hint():
    """Its mask is cut in key tiles of BN, indexed with K's by one loop variable: tiles of one extent."""
    kernel = septran.compile(LIBRARY.attention(False), mapping_file=mapping_path("cpu", "attention"))
    q = _rand(1, 2, 5, 8, seed=1)
    with pytest.raises(septran.CallError) as info:
        kernel(q, q, q, M=_rand(1, 1, 5, 4, seed=2))
    err = info.value
    assert err.loc.file.endswith("attention.py") and "Mp[0, 0, 0, k]" in err.loc.source_line(), str(err)
    assert "M.shape[3] is 4" in str(err)
    assert "task.global_index(M, 3, j) < task.global_size(M, 3)" in err.hint and "pad the shorter" in err.hint


# -- a plain read of a shorter tile ---------------------------------------------------------------------------

@task.define(leaf=True)
def plus(Y, X):
    task.compute(Y, lambda i, j: X[i, j] + 1.0)


@task.define(leaf=True)
def plus_guarded(Y, X):
    task.compute(Y, lambda i, j: task.where(task.global_index(X, 1, j) < task.global_size(X, 1), X[i, j], 0.0) + 1.0)


def test_a_plain_read_of_a_shorter_tile_is_refused_with_the_guard():
    kernel = septran.compile(rows_logic(plus), mapping=rows_mapping("plus"))
    with pytest.raises(septran.CallError) as info:
        kernel(_rand(6, 5, seed=1), Y=torch.empty(6, 7))
    err = info.value
    assert (err.loc.file, err.loc.line) == (HERE, _line(plus)), str(err)
    assert "Y.shape[1] is 7 but X.shape[1] is 5" in str(err)
    assert "task.where(task.global_index(X, 1, j) < task.global_size(X, 1), X[i, j], 0.0)" in err.hint


@task.define(leaf=True)
def plus_loose(Y, X):  # a guard one element too generous: it proves nothing past X's end
    task.compute(Y, lambda i, j: task.where(task.global_index(X, 1, j) < task.global_size(X, 1) + 1, X[i, j], 0.0))


def test_a_guard_that_lets_the_read_out_is_refused_at_the_compute():
    kernel = septran.compile(rows_logic(plus_loose), mapping=rows_mapping("plus_loose"))
    with pytest.raises(septran.LoweringError) as info:
        kernel(_rand(6, 5, seed=1), Y=torch.empty(6, 7))
    err = info.value
    assert (err.loc.file, err.loc.line) == (HERE, _line(plus_loose)), str(err)
    assert "X[i, j] reads X at 0..5 along dimension 1 (j runs over 0..5)" in str(err), str(err)
    assert "holds 5 elements there (0..4)" in str(err)


@pytest.mark.build
def test_the_guarded_read_pads_with_its_value():
    kernel = septran.compile(rows_logic(plus_guarded), mapping=rows_mapping("plus_guarded"))
    x = _rand(6, 5, seed=2)
    torch.testing.assert_close(kernel(x, Y=torch.empty(6, 7)), F.pad(x, (0, 2)) + 1.0, rtol=0, atol=0)
    # An allocated Y takes the width of the read beside it (a guarded one, there being no other): X's.
    torch.testing.assert_close(kernel(x), x + 1.0, rtol=0, atol=0)

