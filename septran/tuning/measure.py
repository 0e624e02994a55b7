"""Building candidates in parallel, checking them against the untuned point, and timing them.

Builds run in worker processes (one per core): each warms TileLang's disk
cache, so the measuring process loads every kernel in milliseconds. A
candidate is run on the same random inputs as the space's first point (the
hand-picked mapping) and must give its answer; a wrong one is recorded and
never chosen. Times are wall clock on the CPU and the DSAs (CUDA events on a
GPU), after a warm-up, over repetitions until a minimum time, and the median
is what counts.
"""
from __future__ import annotations

import json
import logging
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

log = logging.getLogger(__name__)

TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "float16": 2e-2, "bfloat16": 5e-2}


@dataclass(frozen=True)
class Samples:
    samples: tuple[float, ...]
    method: str  # "wall" or "cuda_events"
    warmup: int

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def _build_one(job: tuple[str, str, str]) -> Optional[str]:
    """In a worker: compile one generated program into the caches; the error text, or None."""
    source, name, target_name = job
    try:
        from septran.build import tilelang_api as build
        from septran.target import load_target

        target = load_target(target_name)
        build.compile_kernel(build.load_prim_func(source, name), target, name)
        return None
    except Exception as err:  # noqa: BLE001 - reported per candidate, never fatal to the search
        return f"{type(err).__name__}: {str(err)[:1000]}"


def build_all(jobs: list[tuple[str, str, str]], workers: int) -> list[Optional[str]]:
    """(source, prim_func name, target) -> error text or None, built ``workers`` at a time in worker processes
    (``septran.tuning.build_worker``), each of which handles many jobs."""
    if workers <= 1 or len(jobs) <= 1:
        return [_build_one(j) for j in jobs]
    todo = queue.Queue()
    for k, job in enumerate(jobs):
        todo.put((k, job))
    results: list[Optional[str]] = [None] * len(jobs)

    def worker() -> None:
        proc = subprocess.Popen([sys.executable, "-m", "septran.tuning.build_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            while True:
                try:
                    k, (source, name, target) = todo.get_nowait()
                except queue.Empty:
                    return
                proc.stdin.write(json.dumps({"source": source, "name": name, "target": target}) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                results[k] = json.loads(line)["error"] if line else "the build worker died"
                if not line:
                    return
        finally:
            proc.stdin.close()
            proc.wait()

    threads = [threading.Thread(target=worker) for _ in range(min(workers, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def time_call(fn: Callable[[], object], device: str, warmup: int = 2, min_reps: int = 5,
              min_seconds: float = 0.2, max_reps: int = 1000) -> Samples:
    for _ in range(warmup):
        fn()
    if device == "cuda":
        return _time_cuda(fn, warmup, min_reps, min_seconds, max_reps)
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < min_reps or (time.perf_counter() - start < min_seconds and len(samples) < max_reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return Samples(tuple(samples), "wall", warmup)


def _time_cuda(fn, warmup, min_reps, min_seconds, max_reps) -> Samples:
    import torch

    samples: list[float] = []
    while len(samples) < min_reps or (sum(samples) < min_seconds and len(samples) < max_reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return Samples(tuple(samples), "cuda_events", warmup)


def same_answer(out, ref) -> Optional[str]:
    """None when ``out`` is ``ref`` up to the rounding of another order of summation; else what differs."""
    import torch

    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for k, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape:
            return f"output {k} has shape {tuple(o.shape)}, the reference {tuple(r.shape)}"
        tol = TOLERANCE.get(str(o.dtype).removeprefix("torch."), 1e-3)
        o, r = o.double(), r.double()
        if not torch.equal(o.isnan(), r.isnan()):
            return f"output {k} has NaN where the reference has none (or the reverse)"
        finite = ~r.isnan()
        if not bool(finite.any()):
            continue
        scale = max(1.0, r[finite].abs().max().item())
        err = (o - r)[finite].abs().max().item()
        if not err <= tol * scale:
            return f"output {k}: max |out - reference| = {err:.3e}, more than {tol:g} x {scale:.3g}"
    return None


def interleaved(fns: list[Callable[[], object]], device: str, rounds: int = 7, warmup: int = 2) -> list[Samples]:
    """The best few again, in rounds (A B C A B C ...), so that a slow moment of the machine hits them all."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            samples[k].extend(time_call(fn, device, warmup=0, min_reps=1, min_seconds=0.0, max_reps=1).samples)
    return [Samples(tuple(s), "cuda_events" if device == "cuda" else "wall", warmup) for s in samples]
