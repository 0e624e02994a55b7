"""Compile the SwiGLU MLP (swiglu_mlp.py, then gemm.py for the down projection) for this machine, run it,
check it against torch.

    python examples/swiglu_mlp/run_swiglu_mlp.py [--size TOKENS DIM HIDDEN] [--dtype float16] [--quiet]

Y = (silu(X @ Wg) * (X @ Wu)) @ Wd: two kernels, the fused gate/up projection and a GEMM.
See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import septran  # noqa: E402
from runner import run  # noqa: E402

GEMM = HERE.parent / "gemm" / "gemm.py"


class SwiGLUMLP:
    """The MLP as a caller sees it: one callable, two SepTran kernels inside."""

    def __init__(self):
        self.gate_up = septran.compile(logic_file=HERE / "swiglu_mlp.py")
        self.down = septran.compile(logic_file=GEMM)
        self.target = self.gate_up.target
        self.mapping = self.gate_up.mapping
        self.graph = self.gate_up.graph

    def __call__(self, X, Wg, Wu, Wd):
        return self.down(self.gate_up(X, Wg, Wu), Wd)

    def specialize(self, X, Wg, Wu, Wd):
        """The two variants for these inputs; the gate/up one is returned (the down projection is gemm.py's)."""
        H = ((X.shape[0], Wg.shape[1]), X.dtype)
        self.down.specialize(A=H, B=Wd)
        return self.gate_up.specialize(X=X, Wg=Wg, Wu=Wu)

    @property
    def tilelang_source(self) -> str:
        return self.gate_up.tilelang_source + "\n" + self.down.tilelang_source


def reference(x, wg, wu, wd):
    return (torch.nn.functional.silu(x @ wg) * (x @ wu)) @ wd


def main(tokens: int = 512, dim: int = 512, hidden: int = 1376, dtype: str | None = None, show_source: bool = True,
         repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        scale = dim ** -0.5  # weights as a model initialises them: activations stay O(1)
        shapes = {"X": ((tokens, dim), 1.0), "Wg": ((dim, hidden), scale), "Wu": ((dim, hidden), scale),
                  "Wd": ((hidden, dim), hidden ** -0.5)}
        return {n: (s * torch.randn(*shape, generator=gen)).to(device=device, dtype=dt) for n, (shape, s) in shapes.items()}

    flops = 2.0 * tokens * dim * hidden * 3
    return run(SwiGLUMLP(), f"Y = (silu(X @ Wg) * (X @ Wu)) @ Wd, {tokens} tokens, {dim} -> {hidden} -> {dim}",
               inputs, reference, flops, dtype, show_source, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=3, type=int, metavar=("TOKENS", "DIM", "HIDDEN"), default=(512, 512, 1376))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
