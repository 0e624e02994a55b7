"""Autotuning on the cpu target: the tuned point against the exhaustive best of the same space and the hand mapping.

    python bench/tune.py [--quick] [--json bench/results/tune.json]

For each operator and shape (fp32): the shipped mapping's space is measured
whole once (the cost model's rank correlation comes from it), then tuned as a
user would (a guided search, measuring at most a third of any space larger
than 48 points). The reference best is then found by timing every right point
of the space side by side, in interleaved rounds, which also times the tuned
point and the space's first point (the hand-written mapping): on a shared
machine only measurements taken together compare. Prints a table and writes
JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = [
    ("gemm", "256^3", {"A": ((256, 256), "float32"), "B": ((256, 256), "float32")}),
    ("gemm", "1000^3", {"A": ((1000, 1000), "float32"), "B": ((1000, 1000), "float32")}),
    ("gemm", "1024x512x2048", {"A": ((1024, 2048), "float32"), "B": ((2048, 512), "float32")}),
    ("softmax", "4096x1024", {"X": ((4096, 1024), "float32")}),
    ("layernorm", "4096x1024", {"X": ((4096, 1024), "float32"), "W": ((1024,), "float32"), "B": ((1024,), "float32")}),
    ("attention", "1x8x512x512x64", {"Q": ((1, 8, 512, 64), "float32"), "K": ((1, 8, 512, 64), "float32"),
                                     "V": ((1, 8, 512, 64), "float32")}),
]
QUICK = [CASES[0], CASES[3]]


def _ok(kernel, point: dict, db) -> bool:
    """A point the exhaustive search measured and found right (pruned and wrong points are not in the sweep)."""
    from septran.records.record import point_id

    pid = point_id(point)
    return any(r.point_id == pid and r.status == "ok" for r in db.all())


def run_case(op: str, label: str, inputs: dict, folder: Path, rounds: int = 7) -> dict:
    import septran
    from septran.tuning.api import Measurer
    from septran.records.db import TuningDB

    kernel = septran.compile(logic_file=REPO / "examples" / op / f"{op}.py", mapping_file=REPO / "mappings" / "cpu" / f"{op}.yaml")
    space = kernel.mapping.space
    t0 = time.perf_counter()
    exhaustive_db = TuningDB(folder / f"{op}{label}.all.jsonl")
    exhaustive = septran.tune(kernel, inputs, budget=space.size, db=exhaustive_db, progress=False)
    t1 = time.perf_counter()
    tuned = septran.tune(kernel, inputs, db=TuningDB(folder / f"{op}{label}.tuned.jsonl"), progress=False)
    t2 = time.perf_counter()
    # The reference: every point of the space measured side by side, in interleaved rounds, so that a slow
    # moment of this shared machine hits every point alike; the tuned point and the hand mapping are two of them.
    m = Measurer(kernel, {n: v for n, v in inputs.items()}, kernel.scalar_values({}), seed=1)
    m.reference(space.first)
    points = [p for p in space.points() if _ok(kernel, p, exhaustive_db)]
    sweep = m.interleaved(points, rounds=rounds)
    medians = {json.dumps(p, sort_keys=True): statistics.median(t.samples) for p, t in zip(points, sweep)}
    best_point = min(points, key=lambda p: medians[json.dumps(p, sort_keys=True)])
    tuned_s, best_s, first_s = (medians[json.dumps(p, sort_keys=True)] for p in (tuned.best, best_point, space.first))
    return {
        "op": op, "shape": label, "space": space.size, "pruned": exhaustive.pruned,
        "measured_exhaustive": exhaustive.measured, "measured_tuned": tuned.measured,
        "tuned_point": tuned.best, "best_point": best_point, "search_best_point": exhaustive.best, "first_point": space.first,
        "tuned_s": tuned_s, "exhaustive_best_s": best_s, "first_s": first_s,
        "tuned_over_best": tuned_s / best_s, "speedup_over_hand": first_s / tuned_s,
        "rank_correlation": exhaustive.correlation, "seconds_exhaustive": t1 - t0, "seconds_tuned": t2 - t1,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small cases (a test runs this)")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "tune.json"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for op, label, inputs in (QUICK if args.quick else CASES):
            rows.append(run_case(op, label, inputs, Path(tmp)))
            r = rows[-1]
            print(f"{op:10s} {label:15s} space {r['space']:4d}  measured {r['measured_tuned']:3d} (all: {r['measured_exhaustive']:3d})  "
                  f"tuned {r['tuned_s'] * 1e3:8.3f} ms  best {r['exhaustive_best_s'] * 1e3:8.3f} ms  hand {r['first_s'] * 1e3:8.3f} ms  "
                  f"tuned/best {r['tuned_over_best']:.3f}  hand/tuned {r['speedup_over_hand']:.2f}x  "
                  f"rank corr {r['rank_correlation'] if r['rank_correlation'] is None else round(r['rank_correlation'], 2)}",
                  flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"machine": "2-core AMD EPYC (Zen 4), cpu target, fp32", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
