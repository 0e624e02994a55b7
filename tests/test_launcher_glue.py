"""The launcher's glue (``septran.model.launcher.glue``): the small torch operations of a decode step (positions,
rotary tables, the mask, the embedding, the KV-cache write) done in the launcher's C, each against eager torch
on odd sizes (FlashAttention's rule where it rounds: the error against float64 at most twice eager's).

Each case traces a function of glue operations alone (``make_fx``, so every node has its metadata) into one
``Segment``: its first call records (and runs torch), its second is one call into the built launcher.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from septran.errors import DeviceError
from septran.model.launcher import glue
from septran.model.launcher.runner import Segment
from tests.support.model_graphs import assert_flash_rule

pytestmark = pytest.mark.build  # each case builds its launcher (g++)

aten = torch.ops.aten


def _segment(fn, *inputs, mode="fake"):
    gm = make_fx(fn, tracing_mode=mode)(*inputs)
    ops = [n for n in gm.graph.nodes if n.target in glue._OPS]
    assert ops and all(glue.joins(n) for n in ops), [n.name for n in ops if not glue.joins(n)]
    return Segment(gm, "glue_case", 0)


def _launched(fn, *inputs, mode="fake"):
    """``fn``'s results from its launcher (the second call), after checking that it launched."""
    seg = _segment(fn, *inputs, mode=mode)
    seg(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])  # records
    assert seg.why_not is None and seg.fn is not None, seg.why_not
    out = seg(*inputs)
    assert seg.launches == 1
    return out


def test_positions_mask_and_rotary_tables_match_eager():
    """HF Llama's decode glue at odd sizes: positions from the cache's length, the static cache's mask, the
    rotary tables (int to float, a broadcast product, cat, cos and sin, a scale)."""
    def fn(pos, inv_freq):
        p = aten.arange.default(3) + pos  # three new tokens at pos
        keys = aten.arange.start_step(0, 13, 1)
        mask = aten.le.Tensor(keys.unsqueeze(0).unsqueeze(1).unsqueeze(2), p.unsqueeze(0).unsqueeze(1).unsqueeze(3))
        angles = aten._to_copy.default(p.unsqueeze(0).unsqueeze(2), dtype=torch.float32) * inv_freq
        emb = aten.cat.default([angles, angles], -1)
        return mask, aten.cos.default(emb) * 0.7, aten.sin.default(emb) * 0.7, aten.add.Tensor(pos, 3)

    pos = torch.tensor([5])
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 7, dtype=torch.float32) / 7))
    got = _launched(fn, pos, inv_freq)
    want = fn(pos, inv_freq)
    ref = fn(pos, inv_freq.double())
    assert torch.equal(got[0], want[0]) and torch.equal(got[3], want[3])
    for g, w, r in zip(got[1:3], want[1:3], ref[1:3]):
        assert_flash_rule(g, r, w, eps=1e-6)


def test_elementwise_operations_broadcast_as_torch_does():
    def fn(x, y, n):
        a = aten.sub.Tensor(x, y) / aten.add.Scalar(y, 2.5)
        b = aten.rsqrt.default(aten.exp.default(aten.neg.default(x)) + 1)
        c = aten.eq.Tensor(aten.gt.Scalar(x, 0.25), aten.ne.Scalar(n, 3).unsqueeze(1))  # bool operands
        return a, b, aten.mul.Tensor(n, 7), aten.lt.Tensor(x, y), c

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(5, 11, generator=gen), torch.rand(11, generator=gen)
    n = torch.arange(5)
    seg = _segment(fn, x, y, n)
    seg(x, y, n)
    assert seg.why_not is None, seg.why_not
    got, want, ref = seg(x, y, n), fn(x, y, n), fn(x.double(), y.double(), n)
    for k in (0, 1):
        assert_flash_rule(got[k], ref[k], want[k], eps=1e-6)
    for k in (2, 3, 4):
        assert torch.equal(got[k], want[k])


def test_embedding_and_index_select_gather_rows():
    def fn(table, ids, x, idx):
        return aten.embedding.default(table, ids), aten.index_select.default(x, 1, idx)

    gen = torch.Generator().manual_seed(1)
    table, x = torch.randn(37, 13, generator=gen), torch.randn(3, 9, 5, generator=gen).transpose(1, 2)
    ids, idx = torch.tensor([[36, 0, 17, 5, 5]]), torch.tensor([4, 0, 2], dtype=torch.int32)
    got, want = _launched(fn, table, ids, x, idx), fn(table, ids, x, idx)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    seg = _segment(fn, table, ids, x, idx)
    seg(table, ids, x, idx)
    with pytest.raises(DeviceError):  # an index outside the table: torch raises, so does the launcher
        seg(table, torch.tensor([[1, 37, 0, 0, 0]]), x, idx)


def test_index_copy_writes_the_cache_in_place_at_run_time_positions():
    """A static cache's write at positions read from a tensor (the cache's length)."""
    def fn(cache, new, pos):
        at = aten.arange.default(new.shape[2]) + pos
        aten.index_copy_.default(cache, 2, at, new)
        return (aten.add.Tensor(pos, new.shape[2]),)

    gen = torch.Generator().manual_seed(2)
    cache, new, pos = torch.zeros(1, 3, 23, 5), torch.randn(1, 3, 2, 5, generator=gen), torch.tensor([4])
    seg = _segment(fn, cache.clone(), new, pos)
    seg(cache.clone(), new, pos)
    assert seg.why_not is None, seg.why_not
    for at in (4, 21, 0):
        c, n, p = cache.clone(), torch.randn(1, 3, 2, 5, generator=gen), torch.tensor([at])
        want = c.clone()
        fn(want, n, p)
        (end,) = seg(c, n, p)
        assert torch.equal(c, want) and int(end) == at + 2
    with pytest.raises(DeviceError):  # past the cache's end
        seg(cache.clone(), torch.randn(1, 3, 2, 5), torch.tensor([22]))


def test_what_the_metadata_shows_unsupported_does_not_join():
    """A node the recorder would refuse stays out of the segment (it ends it, as before), so it never keeps a
    whole segment on its steps: an alpha, an infinite scalar, a float arange, indices of two dimensions."""
    def fn(x, ids):
        return (aten.add.Tensor(x, x, alpha=2), aten.mul.Tensor(x, float("inf")),
                aten.arange.start_step(0.5, 3.0, 0.5), aten.embedding.default(x, ids))

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(7, 3), torch.zeros(2, 2, dtype=torch.int64))
    ops = [n for n in gm.graph.nodes if n.target in glue._OPS]
    assert len(ops) == 4 and not any(glue.joins(n) for n in ops)
