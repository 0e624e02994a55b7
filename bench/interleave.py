"""Timing on a shared machine, for bench/cpu.py: interleaved rounds, their statistics, and how much CPU
other processes used meanwhile."""
from __future__ import annotations

import gc
import os
import statistics
import time
from pathlib import Path


class Others:
    """CPU used by everything but this process (other work on a shared machine, steal included), in cores,
    from /proc/stat and /proc/self/stat; and the share of the time some task stalled on CPU or memory
    (Linux's pressure stall information: memory pressure evicts the libraries' code pages). None where absent."""

    def __init__(self):
        self.start = self._read()

    @staticmethod
    def _read():
        try:
            busy = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
            mine = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        stalls = {}
        for kind in ("cpu", "memory"):
            try:  # "some avg10=... total=<microseconds>"
                stalls[kind] = int(Path(f"/proc/pressure/{kind}").read_text().split("\n")[0].rsplit("total=", 1)[1])
            except (OSError, IndexError, ValueError):
                pass
        return time.perf_counter(), sum(busy) - busy[3] - busy[4], int(mine[11]) + int(mine[12]), stalls  # - idle - iowait

    def cores(self) -> float | None:
        end = self._read()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        ticks = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return max(0.0, ticks / os.sysconf("SC_CLK_TCK") / (end[0] - self.start[0]))

    def stalls(self) -> dict:
        end = self._read()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return {}
        return {k: (end[3][k] - v) * 1e-6 / (end[0] - self.start[0]) for k, v in self.start[3].items() if k in end[3]}


def wait_idle(max_s: float, below: float = 0.3) -> float:
    """Waits (at most max_s) until other work uses less than `below` cores over half a second; the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < max_s:
        probe = Others()
        time.sleep(0.5)
        used = probe.cores()
        if used is None or used < below:
            break
    return time.perf_counter() - start


def per_call(fn, n: int) -> float:
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n
    finally:
        gc.enable()


def interleaved(fns: dict, rounds: int, sample_s: float, reps: dict | None = None) -> tuple[dict, dict]:
    """Per function: `rounds` samples (seconds per call), taken in turn; reps: calls per sample
    (default: enough to fill sample_s, from the fastest of two calls after a warm-up call)."""
    if reps is None:
        reps = {}
        for name, fn in fns.items():
            fn()
            reps[name] = max(1, min(100_000, round(sample_s / max(min(per_call(fn, 1), per_call(fn, 1)), 1e-9))))
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(per_call(fn, reps[name]))
    return samples, reps


def stats(samples: list[float], scale: float = 1e3) -> dict:
    """Median, min, max and quartiles of the rounds (ms by default), and every sample."""
    xs = [x * scale for x in samples]
    q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0],) * 3
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "q1": q1, "q3": q3, "samples": xs}
