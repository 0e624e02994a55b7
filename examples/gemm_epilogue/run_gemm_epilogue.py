"""Compile the fused-epilogue GEMM (gemm_epilogue.py) for this machine, run it, check it against torch.

    python examples/gemm_epilogue/run_gemm_epilogue.py [--act gelu] [--transpose-a | --transpose-b] [--size M N K]

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

from gemm_epilogue import gemm_epilogue  # noqa: E402
from runner import run  # noqa: E402

ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
               "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def main(M: int = 512, N: int = 512, K: int = 512, act: str = "relu", transpose_a: bool = False, transpose_b: bool = False,
         dtype: str | None = None, show_source: bool = True, repeats: int = 5) -> float:
    gen = torch.Generator().manual_seed(0)

    def inputs(device, dt):
        a = torch.randn(*((K, M) if transpose_a else (M, K)), generator=gen)
        b = torch.randn(*((N, K) if transpose_b else (K, N)), generator=gen)
        return {name: t.to(device=device, dtype=dt) for name, t in (("A", a), ("B", b), ("bias", torch.randn(N, generator=gen)))}

    def reference(a, b, bias):
        return ACTIVATIONS[act]((a.t() if transpose_a else a) @ (b.t() if transpose_b else b) + bias)

    layout = ("A^T" if transpose_a else "A") + " @ " + ("B^T" if transpose_b else "B")
    return run(gemm_epilogue(act, transpose_a, transpose_b), f"C = {act}({layout} + bias), {M}x{N}x{K}", inputs,
               reference, 2.0 * M * N * K, dtype, show_source, repeats)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=3, type=int, metavar=("M", "N", "K"), default=(512, 512, 512))
    parser.add_argument("--act", default="relu", choices=sorted(ACTIVATIONS))
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument("--transpose-a", action="store_true", help="A is stored K x M")
    layout.add_argument("--transpose-b", action="store_true", help="B is stored N x K")
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, act=args.act, transpose_a=args.transpose_a, transpose_b=args.transpose_b, dtype=args.dtype,
         show_source=not args.quiet)
