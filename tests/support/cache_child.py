"""A fresh process for the cache tests: compiles and runs GEMMs, checks them against torch, prints one JSON line each.

    python tests/support/cache_child.py cpu:33,17,29 dsa_ref:32,48,40 ...

Each job is ``target:M,K,N``. Its line holds whether the result was right and
where its cached artifacts are (SepTran's TileLang source, TileLang's cache
entry, the vendor library), so a test can damage them and run this again.
Warnings go to stderr through logging.
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import torch

import septran
from septran.runtime import vendor

REPO = Path(__file__).resolve().parents[2]


def run(job: str) -> dict:
    target, dims = job.split(":")
    m, k, n = map(int, dims.split(","))
    kern = septran.compile(REPO / "examples" / "gemm" / "gemm.py", mapping_file=REPO / "mappings" / target / "gemm.yaml")
    gen = torch.Generator().manual_seed(m * 10000 + k * 100 + n)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    err = (kern(a, b).double() - a.double() @ b.double()).abs().max().item()
    variant = kern.specialize(A=a, B=b)
    return {
        "job": job,
        "ok": err <= 1e-3,
        "err": err,
        "source": str(variant.source_path),
        "entry": getattr(variant.build(), "_tilelang_cache_path", None),  # a target TileLang builds
        "c_lib": str(getattr(variant.build(), "path", "")) or None,  # a target SepTran builds from C
        "vendor": str(vendor.library_path(kern.target.vendor)) if kern.target.vendor else None,
    }


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for job in sys.argv[1:]:
        print("RESULT " + json.dumps(run(job)), flush=True)  # TileLang logs to stdout too
