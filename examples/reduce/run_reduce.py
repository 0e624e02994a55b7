"""Compile reduce.py for this machine, run it, check it against torch.

    python examples/reduce/run_reduce.py [--op sum|max|min] [--axis 0] [--size 1000 4097] [--dtype float16] [--quiet]

Column sums of a matrix by default (--axis 0); --axis 1 gives row sums; 3 or 4 sizes a tensor of that rank.
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
from reduce import reduce  # noqa: E402

TORCH = {"sum": lambda x, d: x.sum(dim=d), "max": lambda x, d: x.amax(dim=d), "min": lambda x, d: x.amin(dim=d)}


def main(size=(1000, 4097), op: str = "sum", axis: int = 0, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)
    size = tuple(size)

    def inputs(device, dt):
        return {"X": torch.randn(*size, generator=gen).to(device=device, dtype=dt)}

    elem = 2 if (dtype or "float32") == "float16" else 4
    numel = 1
    for s in size:
        numel *= s
    return run(reduce(op, axis, len(size)), f"Y = X.{op}(dim={axis}), {'x'.join(map(str, size))}", inputs,
               lambda x: TORCH[op](x, axis), numel * elem, dtype, show_source, repeats, unit="GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", default="sum", choices=sorted(TORCH))
    parser.add_argument("--axis", type=int, default=0)
    parser.add_argument("--size", nargs="+", type=int, default=(1000, 4097))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(args.size, op=args.op, axis=args.axis, dtype=args.dtype, show_source=not args.quiet)
