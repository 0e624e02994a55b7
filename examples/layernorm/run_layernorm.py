"""Compile layernorm.py for this machine, run it, check it against torch.

    python examples/layernorm/run_layernorm.py [--size ROWS COLS] [--eps EPS] [--dtype float16] [--quiet]

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

from layernorm import layernorm_logic  # noqa: E402
from runner import run  # noqa: E402


def main(rows: int = 512, cols: int = 4097, eps: float = 1e-5, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        return {name: t.to(device=device, dtype=dt) for name, t in (
            ("X", torch.randn(rows, cols, generator=gen) + 1), ("W", torch.randn(cols, generator=gen)),
            ("B", torch.randn(cols, generator=gen)))}

    def reference(x, w, b):
        return torch.nn.functional.layer_norm(x, (cols,), w, b, eps)

    elem = 2 if (dtype or "float32") == "float16" else 4
    return run(layernorm_logic, f"Y = layer_norm(X) * W + B, {rows}x{cols}, eps {eps}", inputs, reference,
               4.0 * rows * cols * elem, dtype, show_source, repeats, unit="GB/s", scalars={"eps": eps})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=2, type=int, metavar=("ROWS", "COLS"), default=(512, 4097))
    parser.add_argument("--eps", type=float, default=1e-5)
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, eps=args.eps, dtype=args.dtype, show_source=not args.quiet)
