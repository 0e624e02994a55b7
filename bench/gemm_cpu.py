"""GEMM on the cpu target: SepTran vs the same kernel hand-written in TileLang vs torch.

SepTran's claim is no speed lost against hand-written TileLang; torch (BLAS,
all cores) is printed for scale. Prints a table and writes bench/results/gemm_cpu.json.

    python bench/gemm_cpu.py [--sizes 256 512 1024] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import septran  # noqa: E402
from reference.handwritten_gemm import handwritten_gemm_cpu  # noqa: E402


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(sizes, repeats: int) -> list[dict]:
    import tilelang

    kernel = septran.compile(logic_file=REPO / "examples/gemm/gemm.py", mapping_file=REPO / "mappings/cpu/gemm.yaml")
    consts = None
    rows = []
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        c = kernel(a, b)
        consts = {x.sym.name: x.value for x in kernel._last.program.consts}
        tgt = kernel.target
        hand = tilelang.compile(
            handwritten_gemm_cpu(n, n, n, consts["BM"], consts["BN"], consts["BK"]),
            target="c", execution_backend=tgt.execution_backend,
            compile_flags=list(tgt.compile_flags), pass_configs=dict(tgt.pass_configs),
        )
        c_hand = torch.empty(n, n)
        hand(a, b, c_hand)
        assert torch.allclose(c, c_hand), "SepTran and the hand-written kernel disagree"
        t_sep = median_seconds(lambda: kernel(a, b), repeats)
        t_hand = median_seconds(lambda: hand(a, b, c_hand), repeats)
        t_torch = median_seconds(lambda: a @ b, repeats)
        gflop = 2.0 * n ** 3 / 1e9
        rows.append({"M=N=K": n, "dtype": "float32", "tiles": f"{consts['BM']}x{consts['BN']}x{consts['BK']}",
                     "septran_ms": t_sep * 1e3, "handwritten_ms": t_hand * 1e3, "torch_ms": t_torch * 1e3,
                     "septran_gflops": gflop / t_sep, "handwritten_gflops": gflop / t_hand, "torch_gflops": gflop / t_torch})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = main(args.sizes, args.repeats)
    print(f"{'M=N=K':>6} {'tiles':>9} {'septran ms':>11} {'hand ms':>9} {'torch ms':>9} {'septran GF/s':>13} {'hand GF/s':>10} {'torch GF/s':>11}")
    for r in rows:
        print(f"{r['M=N=K']:>6} {r['tiles']:>9} {r['septran_ms']:>11.2f} {r['handwritten_ms']:>9.2f} {r['torch_ms']:>9.2f} "
              f"{r['septran_gflops']:>13.2f} {r['handwritten_gflops']:>10.2f} {r['torch_gflops']:>11.2f}")
    out = REPO / "bench" / "results" / "gemm_cpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": f"{torch.get_num_threads()} torch threads", "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
