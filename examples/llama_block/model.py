"""A Llama-style decoder layer, built from code with seeded random weights (nothing is downloaded).

    x -> RMSNorm -> attention (grouped-query heads, RoPE, a KV cache) -> + x -> RMSNorm -> SwiGLU MLP -> + h

Written the way Hugging Face's ``modeling_llama.py`` writes it, so that the graph torch.compile captures is the
one a real Llama gives: RMSNorm upcasts to float32 and multiplies by ``torch.rsqrt(var + eps)``; RoPE is
``q * cos + rotate_half(q) * sin`` with cos and sin precomputed for ``max_len`` positions; grouped heads are either
``repeat_kv`` (expand + reshape, as HF does; ``gqa="repeat"``) or SDPA's own ``enable_gqa=True`` (``gqa="sdpa"``).

The KV cache is the caller's: two preallocated tensors (batch, kv_heads, max_len, head_dim) that ``forward``
writes in place at ``pos`` (a slice assignment; torch.compile keeps it as a mutation of a graph input, which works
with ``fullgraph=True``) and reads back up to ``pos + S``. A prefill (``pos == 0``, S tokens) is causal attention
over its own keys; a decode step (S == 1) attends to the cache's first ``pos + 1`` rows without a mask; a chunk at
``pos > 0`` uses an explicit mask aligned bottom-right (torch's ``is_causal`` is aligned top-left when Sq != Sk).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 688
    max_len: int = 1024
    eps: float = 1e-6
    rope_theta: float = 10000.0
    gqa: str = "repeat"  # "repeat": HF's repeat_kv before SDPA; "sdpa": scaled_dot_product_attention(enable_gqa=True)


class RMSNorm(nn.Module):
    """HF's LlamaRMSNorm: the statistics in float32 whatever the input's dtype, the weight applied after the cast."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(q, k, cos, sin):
    """cos, sin: (S, head_dim); q, k: (batch, heads, S, head_dim)."""
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, groups: int):
    """HF's repeat_kv: (batch, kv_heads, S, D) -> (batch, kv_heads * groups, S, D), each KV head `groups` times."""
    b, h, s, d = x.shape
    if groups == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def rope_tables(head_dim: int, max_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (max_len, head_dim): the (max_len, head_dim / 2) angles repeated twice, as HF builds them."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().float(), emb.sin().float()


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        if cfg.heads % cfg.kv_heads:
            raise ValueError(f"{cfg.heads} query heads are not a multiple of {cfg.kv_heads} KV heads")
        self.cfg = cfg
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_len, cfg.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x, pos: int, k_cache, v_cache):
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = self.cos[pos:pos + s].to(x.dtype), self.sin[pos:pos + s].to(x.dtype)
        q, k = apply_rope(q, k, cos, sin)
        k_cache[:, :, pos:pos + s] = k  # the caller's cache, written in place
        v_cache[:, :, pos:pos + s] = v
        if pos == 0:  # a prefill: its own keys, causal (Sq == Sk, so top-left is bottom-right; S == 1 is causal too)
            keys, values, mask, causal = k, v, None, True
        else:
            keys, values = k_cache[:, :, :pos + s], v_cache[:, :, :pos + s]
            mask = None if s == 1 else torch.ones(s, pos + s, dtype=torch.bool, device=x.device).tril(pos)
            causal = False
        groups = cfg.heads // cfg.kv_heads
        if cfg.gqa == "sdpa":
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, enable_gqa=groups > 1)
        else:
            o = F.scaled_dot_product_attention(q, repeat_kv(keys, groups), repeat_kv(values, groups), attn_mask=mask,
                                               is_causal=causal)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, cfg.heads * cfg.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """One decoder layer. ``forward(x, pos, k_cache, v_cache)``: x (batch, S, hidden) at positions pos .. pos + S - 1."""

    def __init__(self, cfg: LlamaConfig = LlamaConfig()):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, pos: int, k_cache, v_cache):
        h = x + self.self_attn(self.input_layernorm(x), pos, k_cache, v_cache)
        return h + self.mlp(self.post_attention_layernorm(h))

    def new_cache(self, batch: int = 1, dtype=None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed K and V caches (batch, kv_heads, max_len, head_dim)."""
        cfg = self.cfg
        dtype = dtype or self.q_dtype()
        shape = (batch, cfg.kv_heads, cfg.max_len, cfg.head_dim)
        return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)

    def q_dtype(self):
        return self.self_attn.q_proj.weight.dtype


def build(cfg: LlamaConfig = LlamaConfig(), seed: int = 0, dtype=torch.float32) -> LlamaBlock:
    """The layer with seeded random weights (a linear's std 1 / sqrt(its inputs), so activations stay near 1 and the
    attention is not uniform; the norms' weights near 1), in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    model = LlamaBlock(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
    return model.to(dtype).eval()
