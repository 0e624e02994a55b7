"""Compile the GEMM logic (gemm.py) for this machine, run it, check it against torch.

    python examples/gemm/run_gemm.py [--size M N K] [--dtype float16] [--quiet]

See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from runner import run  # noqa: E402


def main(M: int = 512, N: int = 512, K: int = 512, dtype: str | None = None, show_source: bool = True, repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        return {"A": torch.randn(M, K, generator=gen).to(device=device, dtype=dt),
                "B": torch.randn(K, N, generator=gen).to(device=device, dtype=dt)}

    return run(HERE / "gemm.py", f"C = A @ B, {M}x{K} @ {K}x{N}", inputs, torch.matmul, 2.0 * M * N * K,
               dtype, show_source, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=3, type=int, metavar=("M", "N", "K"), default=(512, 512, 512))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"), help="float16 on GPUs, float32 on the CPU by default")
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
