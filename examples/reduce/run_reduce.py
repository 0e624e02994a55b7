"""Compile reduce.py for this machine, run it, check it against torch.

    python examples/reduce/run_reduce.py [--op sum|max|min] [--axis 0] [--size 1000 4097] [--dtype float16] [--quiet]
    python examples/reduce/run_reduce.py --total [--size 1000 4097]     # the sum of every element, split

Column sums of a matrix by default (--axis 0); --axis 1 gives row sums; 3 or 4 sizes a tensor of that rank.
--total sums every element in two kernels of the same logic (row sums, axis 1): the tensor seen as PARTS rows,
one partial sum per row spread over the programs, then the partial sums seen as one row, summed by one program.
See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import septran

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from runner import run  # noqa: E402
from reduce import reduce  # noqa: E402

TORCH = {"sum": lambda x, d: x.sum(dim=d), "max": lambda x, d: x.amax(dim=d), "min": lambda x, d: x.amin(dim=d)}


def total(x: torch.Tensor, parts: int = 256) -> torch.Tensor:
    """The sum of every element of ``x`` (a 1-element tensor): partial sums over the programs, then their sum."""
    kernel = septran.compile(reduce("sum", 1, 2))  # row sums: one partial per row, rows spread over the programs
    flat = x.reshape(-1)
    n = flat.numel()
    parts = max(1, min(parts, n))
    cols = -(-n // parts)
    padded = torch.nn.functional.pad(flat, (0, parts * cols - n)) if parts * cols != n else flat  # zeros add nothing
    partial = kernel(padded.view(parts, cols))  # (parts,)
    return kernel(partial.view(1, parts))  # (1,): the combine, one program


def main_total(size=(1000, 4097), dtype: str | None = None, parts: int = 256) -> float:
    x = torch.randn(*size, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype or "float32"))
    out = total(x, parts)
    ref = x.double().sum()
    err = (out.double().sum() - ref).abs().item()
    print(f"sum of {'x'.join(map(str, size))} elements in {parts} partial sums, then one: {out.item():.6f} "
          f"(float64 {ref.item():.6f}, |diff| {err:.3e})")
    return err


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
    parser.add_argument("--total", action="store_true", help="the sum of every element, split across programs")
    parser.add_argument("--parts", type=int, default=256, help="with --total: how many partial sums")
    args = parser.parse_args()
    if args.total:
        sys.exit(0 if main_total(args.size, args.dtype, args.parts) < 1e-2 else 1)
    main(args.size, op=args.op, axis=args.axis, dtype=args.dtype, show_source=not args.quiet)
