"""Compile cross_entropy.py for this machine, run it, check it against torch.

    python examples/cross_entropy/run_cross_entropy.py [--size ROWS CLASSES] [--dtype float16] [--quiet]

The logits X are float16, bfloat16 or float32, the class ids Y int64, the loss float32. See examples/runner.py
for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from runner import run  # noqa: E402


def main(rows: int = 256, classes: int = 50000, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        x = (3 * torch.randn(rows, classes, generator=gen)).to(device=device, dtype=dt)
        return {"X": x, "Y": torch.randint(0, classes, (rows,), generator=gen).to(device)}

    def reference(x, y):  # the runner hands the class ids in float64 to the reference: they are exact there
        return torch.nn.functional.cross_entropy(x, y.long(), reduction="none")

    elem = {"float16": 2, "bfloat16": 2}.get(dtype or "float32", 4)
    return run(HERE / "cross_entropy.py", f"L = cross_entropy(X, Y, reduction='none'), {rows}x{classes}", inputs,
               reference, rows * classes * elem, dtype, show_source, repeats, unit="GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=2, type=int, metavar=("ROWS", "CLASSES"), default=(256, 50000))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
