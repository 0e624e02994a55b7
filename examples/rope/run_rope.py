"""Compile rope.py for this machine, run it, check it against torch.

    python examples/rope/run_rope.py [--size BATCH SEQ HEADS HEAD_DIM] [--dtype float16] [--quiet]

See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from rope import rope_logic  # noqa: E402
from runner import run  # noqa: E402


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """transformers' apply_rotary_pos_emb for x of (batch, seq, heads, head_dim) and tables of (seq, head_dim)."""
    return x * cos[None, :, None, :] + rotate_half(x) * sin[None, :, None, :]


def tables(seq: int, head_dim: int, base: float = 10000.0):
    """The cos and sin tables (seq, head_dim): each frequency twice, as transformers builds them."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def main(batch: int = 4, seq: int = 2048, heads: int = 32, head_dim: int = 128, dtype: str | None = None,
         show_source: bool = True, repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)
    cos, sin = tables(seq, head_dim)

    def inputs(device, dt):
        return {"X": torch.randn(batch, seq, heads, head_dim, generator=gen).to(device=device, dtype=dt),
                "C": cos.to(device=device, dtype=dt), "S": sin.to(device=device, dtype=dt)}

    elem = 2 if (dtype or "float32") == "float16" else 4
    return run(rope_logic, f"Y = rope(X, cos, sin), {batch}x{seq}x{heads}x{head_dim}", inputs, apply_rope,
               (2.0 * batch * seq * heads * head_dim + 2.0 * seq * head_dim) * elem, dtype, show_source, repeats,
               unit="GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=4, type=int, metavar=("BATCH", "SEQ", "HEADS", "HEAD_DIM"),
                        default=(4, 2048, 32, 128))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
