"""Compile softmax.py for this machine, run it, check it against torch.

    python examples/softmax/run_softmax.py [--log] [--size ROWS COLS] [--dtype float16] [--quiet]

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

from runner import run  # noqa: E402
from softmax import softmax  # noqa: E402


def main(rows: int = 512, cols: int = 4097, log: bool = False, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        return {"X": (3 * torch.randn(rows, cols, generator=gen)).to(device=device, dtype=dt)}

    fn = torch.log_softmax if log else torch.softmax
    name = "log_softmax" if log else "softmax"
    elem = 2 if (dtype or "float32") == "float16" else 4
    return run(softmax(log), f"Y = {name}(X, dim=-1), {rows}x{cols}", inputs, lambda x: fn(x, dim=-1),
               3.0 * rows * cols * elem, dtype, show_source, repeats, unit="GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", action="store_true", help="log-softmax")
    parser.add_argument("--size", nargs=2, type=int, metavar=("ROWS", "COLS"), default=(512, 4097))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, log=args.log, dtype=args.dtype, show_source=not args.quiet)
