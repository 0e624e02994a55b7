"""``torch.ops.septran.attention``: torch's scaled_dot_product_attention as the library's FlashAttention
(``septran/ops/logic/attention.py``).

Sequence lengths are dynamic dimensions of the kernel's mapping (``Q`` and ``K`` along axis 2): one build
serves every prefill length and every decode step's cache length. The op keeps torch's meanings where the
shipped logic's differ:

- torch's ``is_causal`` is aligned top-left (query i sees keys j <= i, whatever the lengths); the logic's causal
  mask is aligned bottom-right (j <= i + Sk - Sq). They agree when Sq == Sk. With fewer queries than keys the
  keys from Sq on are seen by no query: the causal logic runs on the first Sq keys. With more queries than keys
  the op passes torch's mask (``ones(Sq, Sk).tril()``) to the bool-mask logic.
- torch's ``attn_mask`` broadcasts from any shape; the logic takes (1 or B, 1 or H, Sq, Sk): the op expands the
  last two dimensions (a copy only when the mask was smaller) and keeps a shared batch or head dimension shared.
- a causal mask aligned bottom-right (a few new queries against a KV cache) is the logic's own: the pattern
  finds torch's form of it, ``ones(Sq, Sk, dtype=bool).tril(Sk - Sq)``, and passes ``lower_right``.
- ``scale`` 0.0 means torch's default, 1 / sqrt(D), as the logic's ``sm_scale`` does.
"""
from __future__ import annotations

import logging
import math
from typing import Optional

import torch

from septran.ops import kernels
from septran.ops.heads import empty_heads, in_layout

log = logging.getLogger(__name__)
DYNAMIC = (("Q", (2,)), ("K", (2,)))  # the sequence lengths of the queries and of the keys
DECODE_ROWS = 8  # up to this many queries, a target's attention_decode mapping (small blocks of rows) if it has one


def attention_kernel(target: str, causal: bool, gqa: bool, mask: str, decode: bool = False):
    """The compiled kernel for a variant: ``mask`` is "none", "add" (a float mask) or "bool"; ``decode``: for a
    few queries (the target's ``attention_decode`` mapping, where it has one); else without the causal mask the
    target's ``attention_full`` mapping, where it has one (larger query blocks: every block visits every key)."""
    op = "attention_decode" if decode and kernels.has_mapping(target, "attention_decode") else \
        "attention_full" if not causal and kernels.has_mapping(target, "attention_full") else "attention"

    return kernels.kernel((op, target, causal, gqa, mask), target, op, lambda: kernels.logic("attention").attention(
        causal=causal, gqa=gqa, mask="bool" if mask == "bool" else "add"), DYNAMIC)


def _mask4(mask: torch.Tensor, sq: int, sk: int) -> torch.Tensor:
    """torch's broadcastable mask as the logic's (1 or B, 1 or H, Sq, Sk), contiguous."""
    m = mask
    while m.dim() < 4:
        m = m.unsqueeze(0)
    for d in (0, 1):  # a dimension broadcast by a zero stride stays shared: no copy per batch or head
        if m.shape[d] > 1 and m.stride(d) == 0:
            m = m.narrow(d, 0, 1)
    return m.expand(m.shape[0], m.shape[1], sq, sk).contiguous()


def _finite_hides(mask: torch.Tensor, scale: float) -> Optional[torch.Tensor]:
    """The float mask with the values that hide a key by a huge finite number (HF's ``finfo.min``) as -inf.

    The logic adds ``M / scale`` to the scores in float32, where such a value overflows to -inf: the same
    weights (exactly 0) wherever the row sees some key, but zeros instead of torch's average of V where a
    row hides every key. None if some row hides every key so (the caller lets torch compute)."""
    limit = torch.finfo(torch.float32).max * min(scale, 1.0) / 2  # half: QK^T added after the division stays finite
    if torch.finfo(mask.dtype).max < limit:
        return mask
    huge = mask < -limit
    if not bool(huge.any()):
        return mask
    if bool((huge.all(-1) & ~(mask == -math.inf).all(-1)).any()):  # -inf everywhere: zeros in both
        return None
    return mask.masked_fill(huge, -math.inf)


def _torch_attention(q, k, v, mask, scale):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=float(scale) or None)


@torch.library.custom_op("septran::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], causal: bool,
              scale: float, seq_major: bool, lower_right: bool = False) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v for (B, H, S, D) tensors; k and v may have fewer heads (grouped).
    ``causal``: torch's is_causal (top-left), or with ``lower_right`` query i sees keys j <= i + Sk - Sq."""
    b, hq, sq, _ = q.shape
    sk, mask_in = k.shape[2], mask
    if q.numel() == 0 or sk == 0 or v.shape[3] == 0:  # no keys: zeros, as torch gives (the kernel sizes are from 1)
        return empty_heads((b, hq, sq, v.shape[3]), q.dtype, q.device, seq_major).zero_()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if causal and sq != sk and not lower_right:  # torch's causal mask is aligned top-left
        if sq < sk:
            k, v = k[:, :, :sq].contiguous(), v[:, :, :sq].contiguous()
        else:
            mask, causal = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(), False
    kind = "none" if mask is None else ("bool" if mask.dtype == torch.bool else "add")
    if kind == "add":
        mask = _finite_hides(mask, float(scale) or 1.0 / math.sqrt(max(q.shape[3], 1)))
        if mask is None:  # a row hidden by finite numbers only: torch averages V there, the logic gives zeros
            log.info("attention: a row of the float mask hides every key with finite numbers: torch computes it")
            return in_layout(_torch_attention(q, k, v, mask_in, scale), seq_major)
    kernel = attention_kernel(kernels.target_for(q.device), causal, k.shape[1] != hq, kind, decode=sq <= DECODE_ROWS)
    m = None if mask is None else _mask4(mask, sq, k.shape[2])
    out = kernel(q, k, v, m, float(scale))  # positional: keywords take the kernel's slower binding path
    return in_layout(out, seq_major)


@attention.register_fake
def _(q, k, v, mask, causal, scale, seq_major, lower_right=False):
    return empty_heads((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), q.dtype, q.device, seq_major)
