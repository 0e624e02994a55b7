"""Several cold builds at once: threads that each drive one build, so that the compilers (g++, nvcc) run in parallel.

TileLang's parsing and lowering hold the GIL (and run one at a time, see
``tilelang_api``); a thread's g++ runs while the next thread lowers its
program, so N builds take about the lowering of all plus the longest
compile, not the sum of the compiles.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Optional


def build_many(variants: Iterable, jobs: Optional[int] = None) -> list:
    """``[v.build() for v in variants]``, ``jobs`` builds at a time (default: the CPUs this process may use).

    Anything with a ``build()`` method will do (``septran.Variant``); the first failure is raised after every
    build has finished or failed."""
    variants = list(variants)
    if not variants:
        return []
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=min(jobs, len(variants)), thread_name_prefix="septran-build") as pool:
        futures = [pool.submit(v.build) for v in variants]
    return [f.result() for f in futures]
