"""Compile the 2-D convolution logic (conv2d.py) for this machine, run it, check it against torch.

    python examples/conv2d/run_conv2d.py [--size N H W Ci Co] [--kernel KH KW] [--dtype float16] [--quiet]

The input is NHWC and already padded (torch.nn.functional.pad): the output has H - KH + 1 rows and
W - KW + 1 columns. See examples/runner.py for how the target and mapping are chosen.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import septran  # noqa: E402
import septran.runtime.vendor  # noqa: E402
from runner import device_present, median_seconds  # noqa: E402


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch's conv2d on NHWC input and (KH, KW, Ci, Co) filters, through its NCHW layout."""
    return F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)).permute(0, 2, 3, 1)


def main(N: int = 8, H: int = 58, W: int = 58, Ci: int = 64, Co: int = 128, KH: int = 3, KW: int = 3,
         dtype: str | None = None, show_source: bool = True, repeats: int = 5) -> float:
    """Runs the convolution; returns max |Y - reference| (nan where nothing could run)."""
    kernel = septran.compile(logic_file=HERE / "conv2d.py")
    target = kernel.target
    dtype = dtype or ("float32" if target.torch_device == "cpu" else "float16")
    dt = getattr(torch, dtype)
    print(f"target {target.name} ({target.description}); mapping {kernel.mapping.file}")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, H, W, Ci, generator=gen).to(dt)
    w = (torch.randn(KH, KW, Ci, Co, generator=gen) / (KH * KW * Ci) ** 0.5).to(dt)
    y = torch.empty(N, H - KH + 1, W - KW + 1, Co, dtype=dt)
    # Y's shape is tied to no input (H - KH + 1 is no equality), so the call names it.
    variant = kernel.specialize(X=x, W=w, Y=y)
    device = target.torch_device
    if not device_present(device):
        print(f"no {device} device here: showing the generated code only\n")
        print(variant.tilelang_source)
        print(variant.device_source if show_source else "")
        return float("nan")
    x, w, y = x.to(device), w.to(device), y.to(device)
    built = variant.build()

    def run(*tensors):  # what kernel(...) does once outputs can be passed to it: run, then ask the vendor
        built(*tensors)
        septran.runtime.vendor.check_errors(target, variant.program.name)

    start = time.perf_counter()
    run(x, w, y)
    first_call = time.perf_counter() - start
    ref = reference(x.double(), w.double())
    err = (y.double() - ref).abs().max().item()
    torch_err = (reference(x, w).double() - ref).abs().max().item()
    t_septran = median_seconds(lambda: run(x, w, y), repeats, device)
    t_torch = median_seconds(lambda: reference(x, w), repeats, device)
    flops = 2.0 * y.numel() * KH * KW * Ci
    if show_source:
        print(variant.tilelang_source)
    print(f"Y = conv2d(X, W), NHWC {N}x{H}x{W}x{Ci} * {KH}x{KW}x{Ci}x{Co} -> {tuple(y.shape)}, {dtype}")
    print(f"  max |out - ref|  septran {err:.3e}   torch {torch_err:.3e}   (ref in float64)")
    print(f"  first call (compile + run) {first_call:.2f} s")
    print(f"  septran {t_septran * 1e3:8.3f} ms  {flops / t_septran / 1e9:8.2f} GFLOP/s")
    print(f"  torch   {t_torch * 1e3:8.3f} ms  {flops / t_torch / 1e9:8.2f} GFLOP/s")
    return err


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=5, type=int, metavar=("N", "H", "W", "Ci", "Co"), default=(8, 58, 58, 64, 128))
    parser.add_argument("--kernel", nargs=2, type=int, metavar=("KH", "KW"), default=(3, 3))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"), help="float16 on GPUs, float32 on the CPU by default")
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, *args.kernel, dtype=args.dtype, show_source=not args.quiet)
