"""A GPT-2-style transformer block, built from code with seeded random weights (nothing is downloaded).

    x -> LayerNorm -> causal multi-head attention -> + x -> LayerNorm -> Linear -> GELU (tanh) -> Linear -> + h

The attention is written out, as GPT-2's (and nanoGPT's) reference code writes it, not through
``scaled_dot_product_attention``: ``softmax(Q K^T / sqrt(d), causal mask) V``, two batched matmuls around a
``masked_fill`` and a ``softmax``, so the graph holds a softmax for SepTran to take (the Llama block is the one
that exercises SDPA). The mask is a precomputed lower-triangular buffer of ``max_len`` x ``max_len``, sliced at
the block's positions: rows pos .. pos + S - 1, keys 0 .. pos + S - 1 (bottom-right aligned).

The KV cache is the caller's, as in the Llama block: two preallocated tensors (batch, heads, max_len, head_dim)
written in place at ``pos`` and read back up to ``pos + S``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPT2Config:
    hidden: int = 256
    heads: int = 8
    mlp: int = 1024  # 4 x hidden, as GPT-2
    max_len: int = 1024
    eps: float = 1e-5


class Attention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        if cfg.hidden % cfg.heads:
            raise ValueError(f"hidden {cfg.hidden} is not a multiple of {cfg.heads} heads")
        self.cfg = cfg
        self.c_attn = nn.Linear(cfg.hidden, 3 * cfg.hidden)  # Q, K and V in one GEMM, with bias
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.register_buffer("causal", torch.ones(cfg.max_len, cfg.max_len, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x, pos: int, k_cache, v_cache):
        cfg = self.cfg
        b, s, _ = x.shape
        d = cfg.hidden // cfg.heads
        q, k, v = self.c_attn(x).split(cfg.hidden, dim=2)
        q, k, v = (t.view(b, s, cfg.heads, d).transpose(1, 2) for t in (q, k, v))
        k_cache[:, :, pos:pos + s] = k  # the caller's cache, written in place
        v_cache[:, :, pos:pos + s] = v
        keys, values = (k, v) if pos == 0 else (k_cache[:, :, :pos + s], v_cache[:, :, :pos + s])
        att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if s > 1:  # one new token sees every key: no mask
            att = att.masked_fill(~self.causal[pos:pos + s, :pos + s], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ values
        return self.c_proj(y.transpose(1, 2).reshape(b, s, cfg.hidden))


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.hidden, cfg.mlp)
        self.c_proj = nn.Linear(cfg.mlp, cfg.hidden)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    """One block. ``forward(x, pos, k_cache, v_cache)``: x (batch, S, hidden) at positions pos .. pos + S - 1."""

    def __init__(self, cfg: GPT2Config = GPT2Config()):
        super().__init__()
        self.cfg = cfg
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, pos: int, k_cache, v_cache):
        h = x + self.attn(self.ln_1(x), pos, k_cache, v_cache)
        return h + self.mlp(self.ln_2(h))

    def new_cache(self, batch: int = 1, dtype=None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed K and V caches (batch, heads, max_len, head_dim)."""
        cfg = self.cfg
        dtype = dtype or self.attn.c_attn.weight.dtype
        shape = (batch, cfg.heads, cfg.max_len, cfg.hidden // cfg.heads)
        return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)


def build(cfg: GPT2Config = GPT2Config(), seed: int = 0, dtype=torch.float32) -> GPT2Block:
    """The block with seeded random weights (a linear's std 1 / sqrt(its inputs), small biases; the norms' weights
    near 1 and biases near 0), in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    model = GPT2Block(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.startswith("ln_"):
                p.copy_((1 if name.endswith("weight") else 0) + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)
    return model.to(dtype).eval()
