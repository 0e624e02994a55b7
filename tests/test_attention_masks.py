"""Attention with an additive mask (the optional tensor M) and grouped-query attention, on cpu against torch.

examples/attention/attention.py: M is (Bm, Hm, Sq, Sk), Bm 1 or the batch, Hm 1 or the heads, added to
the scaled scores (softmax(Q K^T * scale + M) V, as scaled_dot_product_attention's float attn_mask); a bool
mask is passed as its additive form. With gqa=True, K and V have Hkv heads, Hq % Hkv == 0.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import septran
from conftest import REPO, assert_flash_rule, load_module, mapping_path

LOGIC = load_module(REPO / "examples" / "attention" / "attention.py")
KERNELS: dict = {}


def kernel(causal: bool, gqa: bool, target: str = "cpu", mask: str = "add"):
    key = (causal, gqa, target, mask)
    if key not in KERNELS:
        KERNELS[key] = septran.compile(LOGIC.attention(causal, gqa=gqa, mask=mask),
                                       mapping_file=mapping_path(target, "attention"))
    return KERNELS[key]


def reference(q, k, v, mask, causal: bool, scale=None):
    """torch's scaled_dot_product_attention, K and V repeated per group, the causal mask bottom-right."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    sq, sk = q.shape[-2], k.shape[-2]
    if causal:
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        hide = torch.zeros(sq, sk, dtype=q.dtype).masked_fill(~keep, float("-inf"))
        mask = hide if mask is None else mask + hide
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (batch, Hq, Hkv, Sq, Sk, D, mask batch, mask heads, causal)
CASES = [
    (2, 3, 3, 37, 70, 16, 1, 1, False),  # one (Sq, Sk) mask for all
    (2, 3, 3, 37, 70, 16, 2, 3, True),  # a mask per batch and head, with the causal mask
    (1, 6, 2, 45, 45, 8, 1, 6, False),  # GQA (3 query heads per KV head), a mask per head
    (3, 4, 1, 19, 83, 32, 3, 1, True),  # multi-query attention, a mask per batch, causal
    (2, 6, 3, 70, 33, 16, None, None, True),  # GQA without a mask, more queries than keys
]


@pytest.mark.parametrize("b, hq, hkv, sq, sk, d, mb, mh, causal", CASES)
@pytest.mark.build
def test_mask_and_gqa_match_torch(b, hq, hkv, sq, sk, d, mb, mh, causal):
    q, k, v = _rand(b, hq, sq, d, seed=1), _rand(b, hkv, sk, d, seed=2), _rand(b, hkv, sk, d, seed=3)
    m = None if mb is None else _rand(mb, mh, sq, sk, seed=4) * 2
    kern = kernel(causal, gqa=hq != hkv)
    out = kern(q, k, v) if m is None else kern(q, k, v, M=m)
    ref = reference(q.double(), k.double(), v.double(), None if m is None else m.double(), causal)
    torch_out = reference(q, k, v, m, causal)
    assert_flash_rule(out, ref, torch_out, f"mask {None if m is None else tuple(m.shape)}, {hq} over {hkv} heads")


@pytest.mark.build
def test_mask_by_position_with_sm_scale():
    q, k, v = _rand(1, 2, 29, 16, seed=5), _rand(1, 2, 41, 16, seed=6), _rand(1, 2, 41, 16, seed=7)
    m = _rand(1, 1, 29, 41, seed=8)
    out = kernel(False, False)(q, k, v, m, 0.3)  # M, then sm_scale, by position
    ref = reference(q.double(), k.double(), v.double(), m.double(), False, scale=0.3)
    assert_flash_rule(out, ref, reference(q, k, v, m, False, scale=0.3), "sm_scale 0.3 with a mask")


@pytest.mark.build
def test_a_bool_mask_as_its_additive_form():
    """True = may attend (torch's bool attn_mask); a row that sees nothing gets zeros, as torch gives."""
    q, k, v = _rand(2, 2, 23, 16, seed=9), _rand(2, 2, 50, 16, seed=10), _rand(2, 2, 50, 16, seed=11)
    keep = _rand(2, 1, 23, 50, seed=12) > 0.3
    keep[0, 0, 5] = False  # one query sees no key
    m = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out = kernel(False, False)(q, k, v, M=m)
    ref = reference(q.double(), k.double(), v.double(), m.double(), False)
    assert bool((out[0, :, 5] == 0).all()) and bool((ref[0, :, 5] == 0).all())
    assert_flash_rule(out, ref, reference(q, k, v, m, False), "bool mask")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.build
def test_a_bool_mask_itself(causal):
    """attention(mask="bool"): M is a bool tensor, True = may attend, as torch's bool attn_mask."""
    q, k, v = _rand(2, 3, 29, 16, seed=13), _rand(2, 3, 61, 16, seed=14), _rand(2, 3, 61, 16, seed=15)
    keep = _rand(2, 3, 29, 61, seed=16) > 0.0
    keep[1, 2, 7] = False  # one query sees no key
    out = kernel(causal, False, mask="bool")(q, k, v, M=keep)
    additive = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    ref = reference(q.double(), k.double(), v.double(), additive, causal)
    assert bool((out[1, 2, 7] == 0).all())
    assert_flash_rule(out, ref, reference(q, k, v, additive.float(), causal), "bool mask")


@pytest.mark.parametrize("target", ["sm90", "sm80"])
@pytest.mark.build
def test_gpu_programs_take_a_bool_mask(target):
    shapes = dict(Q=((2, 8, 200, 64), "float16"), K=((2, 8, 300, 64), "float16"), V=((2, 8, 300, 64), "float16"),
                  M=((2, 8, 200, 300), "bool"))
    variant = kernel(False, False, target, mask="bool").specialize(**shapes)
    assert '"bool"' in variant.tilelang_source
    assert "bool" in variant.device_source


def test_a_mask_kind_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="add"):
        LOGIC.attention(mask="multiply")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.build
def test_a_mask_that_hides_whole_key_tiles_of_a_row(causal):
    """Key padding: row r sees keys from 70 r / Sq on, so the first tiles (64 keys) are all -inf for many rows;
    the running maximum is then -inf, and the online softmax must not make NaN of it."""
    sq, sk = 40, 200
    q, k, v = _rand(1, 2, sq, 16, seed=13), _rand(1, 2, sk, 16, seed=14), _rand(1, 2, sk, 16, seed=15)
    first = (torch.arange(sq) * 190 // sq)[:, None]
    m = torch.zeros(1, 1, sq, sk).masked_fill(torch.arange(sk)[None, :] < first, float("-inf"))
    out = kernel(causal, False)(q, k, v, M=m)
    ref = reference(q.double(), k.double(), v.double(), m.double(), causal)
    assert not bool(out.isnan().any())
    assert_flash_rule(out, ref, reference(q, k, v, m, causal), "padding mask")


def test_without_a_mask_the_program_is_the_plain_one():
    shapes = dict(Q=((1, 2, 40, 16), "float32"), K=((1, 2, 40, 16), "float32"), V=((1, 2, 40, 16), "float32"))
    plain = kernel(False, False).specialize(**shapes).tilelang_source
    masked = kernel(False, False).specialize(**shapes, M=((1, 1, 40, 40), "float32")).tilelang_source
    assert "M_dim" not in plain and "M[" in masked


@pytest.mark.parametrize("hq, hkv, number", [(6, 4, "5"), (7, 2, "2"), (2, 4, "is 0")])
def test_heads_that_do_not_divide_are_refused(hq, hkv, number):
    q, k = _rand(1, hq, 5, 8, seed=1), _rand(1, hkv, 6, 8, seed=2)
    with pytest.raises(septran.LoweringError) as info:
        kernel(False, True)(q, k, k)
    msg = str(info.value)
    assert f"Q.shape[1] = {hq}, K.shape[1] = {hkv}" in msg and number in msg and "attention.py" in msg


@pytest.mark.parametrize("mb, mh", [(3, 1), (1, 5)])
def test_a_mask_that_does_not_broadcast_is_refused(mb, mh):
    q = _rand(2, 2, 5, 8, seed=1)
    with pytest.raises(septran.LoweringError, match=r"M\.shape\[[01]\] = [35]"):
        kernel(False, False)(q, q, q, M=_rand(mb, mh, 5, 5, seed=2))


def test_a_mask_of_the_wrong_length_is_refused():
    q = _rand(1, 2, 5, 8, seed=1)
    with pytest.raises(septran.CallError, match=r"M\.shape\[3\] is 4"):
        kernel(False, False)(q, q, q, M=_rand(1, 1, 5, 4, seed=2))


@pytest.mark.parametrize("target", ["sm90", "sm80", "gfx942"])
def test_gpu_programs_stage_the_mask_and_read_the_kv_head_of_the_group(target):
    shapes = dict(Q=((2, 8, 200, 64), "float16"), K=((2, 2, 300, 64), "float16"), V=((2, 2, 300, 64), "float16"),
                  M=((1, 8, 200, 300), "float16"))
    src = kernel(True, True, target).specialize(**shapes).tilelang_source
    assert "M_shared" in src and "by // (Q_dim1 // K_dim1)" in src
    assert math.isfinite(len(src))
