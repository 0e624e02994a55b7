"""GEMM: SepTran vs the same kernel hand-written in TileLang vs torch, on one target.

SepTran's claim is no speed lost against hand-written TileLang (same tiles,
stages and threads); torch is printed for scale. Prints a table and writes
bench/results/gemm_<target>.json.

    python bench/gemm.py                          # cpu, float32
    python bench/gemm.py --target sm90 --dtype float16 --sizes 4096 8192   # on an H100/H200
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "examples"))

import septran  # noqa: E402
from septran.build import tilelang_api as build  # noqa: E402
from reference.handwritten_gemm import handwritten_gemm, handwritten_gemm_cpu  # noqa: E402
from runner import median_seconds  # noqa: E402


def median_ms(fn, repeats: int, device: str) -> float:
    return median_seconds(fn, repeats, device) * 1e3


def handwritten(kernel, n: int, dtype: str):
    """The hand-written TileLang kernel with the mapping's tile sizes, stages and threads, built like SepTran's."""
    consts = {c.sym.name: c.value for c in kernel._last.program.consts}
    tgt = kernel.target
    block = next(i for i in kernel.mapping.instances.values() if i.proc.value != "HOST")
    if tgt.has_threads:
        func = handwritten_gemm(n, n, n, consts["BM"], consts["BN"], consts["BK"],
                                num_stages=block.pipeline.value if block.pipeline else 0,
                                threads=block.threads.value, dtype=dtype)
    else:
        func = handwritten_gemm_cpu(n, n, n, consts["BM"], consts["BN"], consts["BK"], dtype=dtype)
    return build.compile_kernel(func, tgt, "the hand-written GEMM")


def main(target: str, dtype: str, sizes, repeats: int) -> list[dict]:
    kernel = septran.compile(logic_file=REPO / "examples/gemm/gemm.py", mapping_file=REPO / f"mappings/{target}/gemm.yaml")
    device = kernel.target.torch_device
    tdtype = getattr(torch, dtype)
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=device).to(tdtype)
        b = torch.randn(n, n, device=device).to(tdtype)
        c = kernel(a, b)
        hand = handwritten(kernel, n, dtype)
        c_hand = torch.empty(n, n, device=device, dtype=tdtype)
        hand(a, b, c_hand)
        assert torch.allclose(c.float(), c_hand.float(), rtol=1e-2, atol=1e-2), "SepTran and the hand-written kernel disagree"
        t_sep = median_ms(lambda: kernel(a, b), repeats, device)
        t_hand = median_ms(lambda: hand(a, b, c_hand), repeats, device)
        t_torch = median_ms(lambda: a @ b, repeats, device)
        tflop = 2.0 * n ** 3 / 1e12
        rows.append({"n": n, "dtype": dtype, "septran_ms": t_sep, "handwritten_ms": t_hand, "torch_ms": t_torch,
                     "septran_tflops": tflop / t_sep * 1e3, "handwritten_tflops": tflop / t_hand * 1e3,
                     "torch_tflops": tflop / t_torch * 1e3})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--dtype", default=None, help="float32 on the cpu, float16 elsewhere")
    parser.add_argument("--sizes", nargs="+", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    on_cpu = args.target == "cpu" or args.target.startswith("dsa")
    dtype = args.dtype or ("float32" if on_cpu else "float16")
    sizes = args.sizes or ([256, 512, 1024] if on_cpu else [2048, 4096, 8192])
    rows = main(args.target, dtype, sizes, args.repeats)
    print(f"GEMM on {args.target}, {dtype} (ms: median of {args.repeats}; TFLOP/s)")
    print(f"{'n':>6} {'septran ms':>11} {'hand ms':>9} {'torch ms':>9} {'septran':>9} {'hand':>9} {'torch':>9}")
    for r in rows:
        print(f"{r['n']:>6} {r['septran_ms']:>11.3f} {r['handwritten_ms']:>9.3f} {r['torch_ms']:>9.3f} "
              f"{r['septran_tflops']:>9.4f} {r['handwritten_tflops']:>9.4f} {r['torch_tflops']:>9.4f}")
    out = REPO / "bench" / "results" / f"gemm_{args.target}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"target": args.target, "torch_threads": torch.get_num_threads(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
