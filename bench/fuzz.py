"""Fuzz SepTran with mutated mappings and logic files; count what comes out.

    python bench/fuzz.py [--mappings 10000] [--logic 2500] [--seed 0] [--jobs 2] [--timeout 120]
                         [--families tracer,index,dtype] [--json out.json]

Every case is compiled (mutations: bench/fuzz_mutate.py: bytes of mappings, with
accumulator types, memories and leaves of any target drawn; logic tokens, with
int32/int64/bool/float16/bfloat16 drawn for temps and outputs); an accepted case
for a target that runs here (cpu and the DSAs) is run on small random inputs and
compared with torch's result (bench/fuzz_case.py), and one case in four is also
called from 3 threads at once, one in four with an output passed over an input
(which must be refused). Cases run in worker
processes, each handling many cases: a worker that dies mid-case records
``crash`` for that case and is replaced; one that exceeds ``--timeout``
records ``hang`` and is killed. The SepTran and TileLang caches dedup
identical programs, so most accepted cases build nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing as mp
import sys
import time
from itertools import chain
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_case import OUTCOMES, logic_cases, mapping_cases, run_case  # noqa: E402

log = logging.getLogger("fuzz")


def _worker(conn) -> None:
    logging.disable(logging.WARNING)  # TileLang's cache chatter; outcomes are what this process reports
    while True:
        case = conn.recv()
        if case is None:
            return
        conn.send(run_case(case))


class Worker:
    """One worker process and its pipe; replaced after a crash or a hang."""

    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.case = None
        self.started = 0.0

    def give(self, case) -> None:
        self.case, self.started = case, time.monotonic()
        self.conn.send(case)

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()


def run_all(cases, jobs: int, timeout: float, progress=None):
    """Yields (case, result) for every case, ``jobs`` at a time."""
    ctx = mp.get_context("spawn")  # no fork of a process holding threads
    workers = [Worker(ctx) for _ in range(jobs)]
    pending = iter(cases)
    busy = 0
    try:
        for w in workers:
            case = next(pending, None)
            if case is not None:
                w.give(case)
                busy += 1
        while busy:
            ready = mp.connection.wait([w.conn for w in workers if w.case is not None] +
                                       [w.proc.sentinel for w in workers if w.case is not None], timeout=1.0)
            now = time.monotonic()
            for i, w in enumerate(workers):
                if w.case is None:
                    continue
                result = None
                if w.conn in ready:
                    try:
                        result = w.conn.recv()
                    except (EOFError, OSError):
                        result = {"outcome": "crash", "detail": f"worker died (exit code {w.proc.exitcode})"}
                elif w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join()
                    result = {"outcome": "crash", "detail": f"worker died (exit code {w.proc.exitcode})"}
                elif now - w.started > timeout:
                    result = {"outcome": "hang", "detail": f"no result after {timeout:.0f} s"}
                if result is None:
                    continue
                case = w.case
                w.case = None
                busy -= 1
                if result["outcome"] in ("crash", "hang"):
                    w.stop()
                    workers[i] = w = Worker(ctx)
                yield case, result
                if progress:
                    progress()
                nxt = next(pending, None)
                if nxt is not None:
                    w.give(nxt)
                    busy += 1
    finally:
        for w in workers:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            w.stop()


def table(counts: dict) -> str:
    kinds = list(counts)
    w = [max(10, len(k) + 2) for k in kinds]
    rows = [f"{'outcome':<12}" + "".join(f"{k:>{n}}" for k, n in zip(kinds, w))]
    for o in OUTCOMES:
        rows.append(f"{o:<12}" + "".join(f"{counts[k].get(o, 0):>{n}}" for k, n in zip(kinds, w)))
    rows.append(f"{'total':<12}" + "".join(f"{sum(counts[k].values()):>{n}}" for k, n in zip(kinds, w)))
    return "\n".join(rows)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mappings", type=int, default=10000)
    parser.add_argument("--logic", type=int, default=2500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--families", default="tracer,index,dtype", help="logic mutation families (tracer, index, dtype)")
    parser.add_argument("--json", type=Path, default=None, help="write counts and every unexpected case here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    families = tuple(args.families.split(","))
    cases = chain(mapping_cases(args.mappings, args.seed), logic_cases(args.logic, args.seed, families))
    total = args.mappings + args.logic
    try:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="case")
        progress = lambda: bar.update(1)  # noqa: E731
    except ImportError:
        bar, done = None, [0]

        def progress():
            done[0] += 1
            if done[0] % 250 == 0 or done[0] == total:
                log.info("%d / %d cases", done[0], total)
    counts: dict[str, collections.Counter] = {}
    unexpected = []
    start = time.monotonic()
    for case, result in run_all(cases, args.jobs, args.timeout, progress):
        kind = case["kind"] if case["kind"] == "mapping" else f"logic:{case['family']}"
        counts.setdefault(kind, collections.Counter())[result["outcome"]] += 1
        if result["outcome"] not in ("correct", "accepted", "located"):
            unexpected.append({"kind": kind, "index": case["index"], "mutation": case["mutation"][:300], **result})
    if bar is not None:
        bar.close()
    counts = {k: counts[k] for k in sorted(counts)}
    print(table(counts))
    print(f"{total} cases in {time.monotonic() - start:.0f} s with {args.jobs} workers (seed {args.seed})")
    report = {"seed": args.seed, "counts": {k: dict(v) for k, v in counts.items()}, "unexpected": unexpected,
              "seconds": round(time.monotonic() - start, 1)}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
