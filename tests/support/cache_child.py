"""A fresh process for the cache tests: compiles and runs GEMMs, checks them against torch, prints one JSON line each.

    python tests/support/cache_child.py cpu:33,17,29 dsa_ref:32,48,40 ...

Each job is ``target:M,K,N``. Its line holds whether the result was right,
how long it took from ``septran.compile`` to the result, where its cached artifacts are (SepTran's TileLang source, TileLang's cache
entry, the kernel library SepTran built, the vendor library), so a test can
damage them and run this again, how many times this process ran a compiler
(``compilers``, counted over all jobs so far) and whether it imported TileLang.
Warnings go to stderr through logging.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import torch

import septran
from septran.build import shared_lib, vendor

REPO = Path(__file__).resolve().parents[2]
COMPILERS = []  # every compiler run of this process (g++ of a kernel or a vendor library)
_run_compiler = shared_lib.run_compiler
shared_lib.run_compiler = lambda cmd, what: COMPILERS.append(what) or _run_compiler(cmd, what)


def run(job: str) -> dict:
    target, dims = job.split(":")
    m, k, n = map(int, dims.split(","))
    gen = torch.Generator().manual_seed(m * 10000 + k * 100 + n)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    start = time.perf_counter()
    kern = septran.compile(REPO / "examples" / "gemm" / "gemm.py", mapping_file=REPO / "mappings" / target / "gemm.yaml")
    compiled = time.perf_counter()
    out = kern(a, b)
    seconds = time.perf_counter() - start  # from septran.compile to the first result
    err = (out.double() - a.double() @ b.double()).abs().max().item()
    variant = kern.specialize(A=a, B=b)
    return {
        "job": job,
        "ok": err <= 1e-3,
        "seconds": seconds,
        "call_seconds": seconds - (compiled - start),  # the first call: lower, key, load (or build), run
        "err": err,
        "source": str(variant.source_path),
        "entry": getattr(variant.build(), "_tilelang_cache_path", None),  # a target TileLang builds
        "c_lib": str(getattr(variant.build(), "path", "")) or None,  # a target SepTran builds from C
        "vendor": str(vendor.library_path(kern.target.vendor)) if kern.target.vendor else None,
        "compilers": len(COMPILERS),
        "tilelang": "tilelang" in sys.modules,
    }


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for job in sys.argv[1:]:
        print("RESULT " + json.dumps(run(job)), flush=True)  # TileLang logs to stdout too
