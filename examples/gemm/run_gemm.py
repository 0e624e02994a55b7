"""Compile the GEMM logic (gemm.py) for this machine, run it, check it against torch.

The mapping is chosen the way a notebook user's would be: SEPTRAN_MAPPING, else
mappings/<target>/gemm.yaml, with the target from SEPTRAN_TARGET or the
detected GPU (cpu where there is none). Where the target's device is absent
(SEPTRAN_TARGET=sm90 on a laptop), only the generated code is shown.

    python examples/gemm/run_gemm.py [--size M N K] [--dtype float16] [--quiet]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import septran

HERE = Path(__file__).resolve().parent


def _device_present(kind: str) -> bool:
    return kind == "cpu" or (kind == "cuda" and torch.cuda.is_available())


def _median_seconds(fn, repeats: int, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(M: int = 512, N: int = 512, K: int = 512, dtype: str | None = None, show_source: bool = True, repeats: int = 5) -> float:
    """Runs one GEMM; returns max |C - reference| (nan where nothing could run).

    ``dtype`` defaults to float16 on GPUs (tensor cores) and float32 on the CPU.
    """
    kernel = septran.compile(logic_file=HERE / "gemm.py")
    target = kernel.target
    dtype = dtype or ("float32" if target.torch_device == "cpu" else "float16")
    print(f"target {target.name} ({target.description}); mapping {kernel.mapping.file}")
    torch_dtype = getattr(torch, dtype)
    if not _device_present(target.torch_device):
        variant = kernel.specialize(A=((M, K), dtype), B=((K, N), dtype))
        print(f"no {target.torch_device} device here: showing the generated code only\n")
        print(variant.tilelang_source)
        print(variant.device_source if show_source else "")
        return float("nan")
    device = target.torch_device
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(M, K, generator=gen).to(device=device, dtype=torch_dtype)
    b = torch.randn(K, N, generator=gen).to(device=device, dtype=torch_dtype)
    start = time.perf_counter()
    c = kernel(a, b)
    first_call = time.perf_counter() - start
    ref = a.double() @ b.double()
    err = (c.double() - ref).abs().max().item()
    torch_err = ((a @ b).double() - ref).abs().max().item()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t_septran = _median_seconds(lambda: kernel(a, b), repeats, sync)
    t_torch = _median_seconds(lambda: a @ b, repeats, sync)
    if show_source:
        print(kernel.tilelang_source)
    flops = 2.0 * M * N * K
    print(f"C = A @ B, {M}x{K} @ {K}x{N}, {dtype}")
    print(f"  max |C - ref|  septran {err:.3e}   torch {torch_err:.3e}   (ref in float64)")
    print(f"  first call (compile + run) {first_call:.2f} s")
    print(f"  septran {t_septran * 1e3:8.3f} ms  {flops / t_septran / 1e9:8.2f} GFLOP/s")
    print(f"  torch   {t_torch * 1e3:8.3f} ms  {flops / t_torch / 1e9:8.2f} GFLOP/s")
    return err


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=3, type=int, metavar=("M", "N", "K"), default=(512, 512, 512))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"), help="float16 on GPUs, float32 on the CPU by default")
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
