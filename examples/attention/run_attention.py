"""Compile attention.py for this machine, run it, check it against torch.

    python examples/attention/run_attention.py [--causal] [--size BATCH HEADS SQ SK D] [--dtype float16] [--quiet]

See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from attention import attention  # noqa: E402
from runner import run  # noqa: E402


def reference(q, k, v, causal: bool):
    """softmax(Q K^T / sqrt(D), masked) V, the causal mask aligned bottom-right (query i sees keys j <= i + Sk - Sq)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[-2], k.shape[-2]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def main(batch: int = 2, heads: int = 4, sq: int = 203, sk: int = 203, d: int = 64, causal: bool = False,
         dtype: str | None = None, show_source: bool = True, repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        return {name: torch.randn(batch, heads, s, d, generator=gen).to(device=device, dtype=dt)
                for name, s in (("Q", sq), ("K", sk), ("V", sk))}

    flops = 4.0 * batch * heads * sq * sk * d * (0.5 if causal else 1.0)
    return run(attention(causal), f"O = attention(Q, K, V{', causal' if causal else ''}), "
               f"{batch}x{heads} heads, Sq {sq}, Sk {sk}, D {d}", inputs, lambda q, k, v: reference(q, k, v, causal),
               flops, dtype, show_source, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--size", nargs=5, type=int, metavar=("BATCH", "HEADS", "SQ", "SK", "D"), default=(2, 4, 203, 203, 64))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, causal=args.causal, dtype=args.dtype, show_source=not args.quiet)
