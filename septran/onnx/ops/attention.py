"""ONNX ``Attention`` (opset 23 on): 3-D or 4-D Q, K, V, grouped heads, a bool or additive mask (shorter than the
keys: padded), causal masks aligned bottom-right, a KV cache (past_key/past_value -> present_*), soft-capping,
``nonpad_kv_seqlen``, sliding windows and the ``qk_matmul_output`` modes, as ``onnx.reference`` computes them.

The common case is one ``F.scaled_dot_product_attention`` (grouped heads through ``enable_gqa``), the call the
SepTran attention pattern takes; a row every key of which is masked gives 0 (ONNX's rule, where torch gives NaN),
so a mask is followed by that guard. Soft-capping, a requested ``qk_matmul_output``, ``nonpad_kv_seqlen`` and
windows take the explicit form (matmul, softmax, matmul), in which SepTran may still take the pieces it knows.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from septran.onnx.ops.registry import op


def _heads(x, n):
    """(B, S, n*H) -> (B, n, S, H)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n, hidden // n).transpose(1, 2)


def _merge(y):
    b, h, s, d = y.shape
    return y.transpose(1, 2).reshape(b, s, h * d)


def _pad_mask(mask, total):
    short = total - mask.shape[-1]
    if short <= 0:
        return mask
    return F.pad(mask, (0, short), value=False if mask.dtype == torch.bool else float("-inf"))


def _allowed(sq, sk, offset, left, right):
    """Bool (…, Sq, Sk): key j allowed for query i by a causal frontier ``j <= i + offset`` (offset a number or
    a (B,) tensor) and a window; None for no limit."""
    device = offset.device if isinstance(offset, torch.Tensor) else None
    i = torch.arange(sq, device=device).reshape(sq, 1)
    j = torch.arange(sk, device=device).reshape(1, sk)
    if isinstance(offset, torch.Tensor):
        i = i + offset.reshape(-1, 1, 1, 1).to(i.dtype)
    elif offset:
        i = i + offset
    ok = None
    for cond in (j <= i if right == "causal" else None,
                 (i - j) <= left if left >= 0 else None,
                 (j - i) <= right if isinstance(right, int) and right >= 0 else None):
        if cond is not None:
            ok = cond if ok is None else ok & cond
    return ok


def _bias(mask, dtype):
    return mask if mask.dtype != torch.bool else torch.where(mask, 0.0, float("-inf")).to(dtype)


def _sdpa(q, k, v, mask, causal, scale, gqa):
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)
    if mask is None:
        return y
    if mask.dtype == torch.bool:
        dead = ~mask.any(-1, keepdim=True)
    else:
        dead = torch.isneginf(mask.amax(-1, keepdim=True))
    return torch.where(dead, torch.zeros((), dtype=y.dtype, device=y.device), y)


def _explicit(q, k, v, bias, scale, softcap, mode, precision):
    """onnx.reference's order: scaled scores, soft cap, + bias, softmax (in ``precision``), zero dead rows, @ V."""
    reps = q.shape[1] // k.shape[1]
    if reps > 1:
        k, v = k.repeat_interleave(reps, 1), v.repeat_interleave(reps, 1)
    s = math.sqrt(scale)
    scores = torch.matmul(q * s, (k * s).transpose(-1, -2))
    capped = softcap * torch.tanh(scores / softcap) if softcap > 0 else scores
    with_bias = capped if bias is None else capped + bias
    p = torch.softmax(with_bias.to(precision), -1)
    if bias is not None:
        dead = torch.isneginf(bias.amax(-1, keepdim=True))
        p = torch.where(dead, torch.zeros((), dtype=p.dtype, device=p.device), p)
        p = torch.nan_to_num(p, nan=0.0) if precision != q.dtype else p
    qk = {0: scores, 1: capped, 2: with_bias, 3: p}.get(mode, scores)
    if mode == 1 and softcap <= 0:
        qk = scores
    y = torch.matmul(p.to(q.dtype), v)
    return y, qk.to(q.dtype)


@op("Attention")
def attention(b, n):
    from septran.onnx.dtypes import to_torch

    q, k, v = n.input(0), n.input(1), n.input(2)
    mask, past_k, past_v = n.input(3), n.input(4), n.input(5)
    nonpad = n.input(6)
    three_d = len(n.shape(0)) == 3
    if three_d:
        q = n.call(_heads, q, n.attr("q_num_heads"))
        k = n.call(_heads, k, n.attr("kv_num_heads"))
        v = n.call(_heads, v, n.attr("kv_num_heads"))
    if past_k is not None:
        k = n.call(torch.cat, [past_k, k], 2)
        v = n.call(torch.cat, [past_v, v], 2)
    present_k, present_v = k, v
    qm, km = (b_.meta["val"] if not isinstance(b_, torch.Tensor) else b_ for b_ in (q, k))
    sq, sk, d, dtype = qm.shape[2], km.shape[2], qm.shape[3], qm.dtype
    scale = n.attr("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    softcap = float(n.attr("softcap", 0.0) or 0.0)
    mode = n.attr("qk_matmul_output_mode", 0)
    causal = bool(n.attr("is_causal", 0))
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    precision = to_torch(n.attr("softmax_precision")) if n.attr("softmax_precision") is not None else dtype
    if mask is not None:
        mask = n.call(_pad_mask, mask, sk)
    offset = past_k is not None and n.shape(4)[2] or 0
    if nonpad is not None and past_k is None:
        offset = n.call(torch.sub, nonpad, sq)
    frontier = "causal" if causal else right
    limits = causal or left >= 0 or (isinstance(right, int) and right >= 0)
    allowed = n.call(_allowed, sq, sk, offset, left, frontier) if limits else None
    if nonpad is not None:
        pad_ok = n.call(_nonpad, nonpad, sk)
        allowed = pad_ok if allowed is None else n.call(torch.logical_and, allowed, pad_ok)
    gqa = n.shape(0)[1] != km.shape[1] if not three_d else n.attr("q_num_heads") != n.attr("kv_num_heads")
    fast = softcap <= 0 and not n.wants(3) and nonpad is None and precision in (dtype, torch.float32)
    if fast:
        plain_causal = causal and offset == 0 and mask is None and left < 0
        if plain_causal:
            y = n.call(_sdpa, q, k, v, None, True, scale, gqa)
        else:
            m = _combine(n, mask, allowed, dtype)
            y = n.call(_sdpa, q, k, v, m, False, scale, gqa)
        qk = None
    else:
        m = _combine(n, mask, allowed, dtype)
        bias = None if m is None else n.call(_bias, m, dtype)
        y, qk = n.call(_explicit, q, k, v, bias, scale, softcap, mode, precision)
    if three_d:
        y = n.call(_merge, y)
    return [y, present_k, present_v, qk]


def _nonpad(lengths, sk):
    return (torch.arange(sk, device=lengths.device).reshape(1, sk) < lengths.reshape(-1, 1)).reshape(-1, 1, 1, sk)


def _combine(n, mask, allowed, dtype):
    """One mask from the user's (bool or additive) and the causal/window/padding limits (bool)."""
    if allowed is None:
        return mask
    if mask is None:
        return allowed
    mask_dtype = mask.dtype if isinstance(mask, torch.Tensor) else mask.meta["val"].dtype
    if mask_dtype == torch.bool:
        return n.call(torch.logical_and, mask, allowed)
    return n.call(torch.add, mask, n.call(_bias, allowed, dtype))
