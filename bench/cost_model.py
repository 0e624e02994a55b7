"""The cost model against the clock: GEMM tile configurations on the cpu, estimated and measured.

For each (BM, BN, BK) the shipped cpu mapping is edited, the tile program's
roofline estimate taken (septran/tuning/cost.py) and the kernel timed (wall
clock, rounds interleaved across configurations, the median per one). Prints
a table and Spearman's rank correlation between estimates and medians, and
writes bench/results/cost_model_cpu.json.

    python bench/cost_model.py                 # 512^3, eight configurations
    python bench/cost_model.py --size 1024 --rounds 7
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

import septran
from septran.tuning.cost import estimate, program_value, rank_correlation

REPO = Path(__file__).resolve().parents[1]
SHIPPED = re.compile(r"tunables: \{BM: [^\n]*\}")  # the tunables line of mappings/cpu/gemm.yaml (a !tune space)
CONFIGS = [(32, 32, 32), (128, 128, 16), (64, 64, 32), (16, 16, 16), (128, 128, 32), (64, 64, 16), (32, 32, 128), (128, 32, 16)]


def gemm_kernel(folder: Path, bm: int, bn: int, bk: int):
    text = (REPO / "mappings" / "cpu" / "gemm.yaml").read_text()
    assert SHIPPED.search(text), "mappings/cpu/gemm.yaml no longer has the tunables this benchmark edits"
    path = folder / f"gemm_{bm}x{bn}x{bk}.yaml"
    text = re.sub(r"^shape_points:\n(?:[ -].*\n?)*", "", text, flags=re.M)  # they name the space's points: gone with it
    path.write_text(SHIPPED.sub(f"tunables: {{BM: {bm}, BN: {bn}, BK: {bk}}}", text, count=1))
    return septran.compile(logic_file=REPO / "examples" / "gemm" / "gemm.py", mapping_file=path)


def run(n: int = 512, configs=CONFIGS, rounds: int = 5, reps: int = 3) -> dict:
    """Estimates and measured medians (seconds) of each configuration, and their rank correlation."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    rows, kernels = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for bm, bn, bk in configs:
            kernel = gemm_kernel(Path(tmp), bm, bn, bk)
            program = kernel.specialize(A=((n, n), "float32"), B=((n, n), "float32")).program
            est = estimate(program, kernel.target, program_value(program))
            kernel(a, b)  # compile and warm up
            kernels.append(kernel)
            rows.append({"BM": bm, "BN": bn, "BK": bk, "estimate_s": est.seconds, "flops": est.flops, "bytes": est.bytes,
                         "programs": est.programs, "bound": est.bound, "samples_s": []})
        for _ in range(rounds):  # interleaved: a burst of load from elsewhere hits every configuration alike
            for row, kernel in zip(rows, kernels):
                for _ in range(reps):
                    t = time.perf_counter()
                    kernel(a, b)
                    row["samples_s"].append(time.perf_counter() - t)
    for row in rows:
        row["measured_s"] = statistics.median(row["samples_s"])
    rho = rank_correlation([r["estimate_s"] for r in rows], [r["measured_s"] for r in rows])
    return {"operator": "gemm", "target": "cpu", "n": n, "rounds": rounds, "reps": reps, "spearman": rho, "rows": rows}


def table(result: dict) -> str:
    lines = [f"GEMM {result['n']}^3 float32 on cpu: the cost model's estimate vs the median of "
             f"{result['rounds'] * result['reps']} runs",
             f"{'BM':>4} {'BN':>4} {'BK':>4} {'programs':>9} {'MB moved':>9} {'bound':>8} {'estimate ms':>12} {'measured ms':>12}"]
    for r in result["rows"]:
        lines.append(f"{r['BM']:>4} {r['BN']:>4} {r['BK']:>4} {r['programs']:>9} {r['bytes'] / 1e6:>9.1f} {r['bound']:>8} "
                     f"{r['estimate_s'] * 1e3:>12.2f} {r['measured_s'] * 1e3:>12.2f}")
    lines.append(f"Spearman rank correlation: {result['spearman']:.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    result = run(args.size, rounds=args.rounds, reps=args.reps)
    print(table(result))
    out = REPO / "bench" / "results" / "cost_model_cpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
