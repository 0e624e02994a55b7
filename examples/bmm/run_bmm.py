"""Compile the batched GEMM logic (bmm.py) for this machine, run it, check it against torch.

    python examples/bmm/run_bmm.py [--size BATCH M N K] [--dtype float16] [--quiet]

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


def main(batch: int = 8, M: int = 256, N: int = 256, K: int = 256, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        return {"A": torch.randn(batch, M, K, generator=gen).to(device=device, dtype=dt),
                "B": torch.randn(batch, K, N, generator=gen).to(device=device, dtype=dt)}

    return run(HERE / "bmm.py", f"C[b] = A[b] @ B[b], {batch} x {M}x{K} @ {K}x{N}", inputs, torch.bmm,
               2.0 * batch * M * N * K, dtype, show_source, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=4, type=int, metavar=("BATCH", "M", "N", "K"), default=(8, 256, 256, 256))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
