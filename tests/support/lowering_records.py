"""TileLang's device source (the C of cpu kernels, the CUDA and HIP of GPU ones, a DSA's C) for the kernels the
suite builds, recorded: a fresh clone's run parses and lowers each through TileLang only where SepTran's source
changed.

Parsing a kernel's TileLang source and lowering it took about 1 to 2 s of CPU per cpu kernel here (more for GPU
ones), for about 900 kernels per run: the largest part of the suite's time. TileLang's answer depends only on
the exact source, the kernel's name, TileLang's target and pass configs and TileLang's version, so a record keyed
by their hash stands in for it (``tilelang_api.device_source_of``, the one seam both builders' device stage
calls); a kernel whose source changed misses and is lowered for real. Everything after TileLang's print still
runs on every kernel: SepTran's OpenMP and loop-split rewrites, g++ (or nvcc, where a test asks), the calling
convention, the numerics; a DSA's or GPU's binary still goes through ``tilelang.compile``. A child process a test
starts gets the records where the test passes ``child_env`` (the models bench's smoke run, the tuning command);
the cache tests' children build for real. ``test_lowering_records`` lowers one recorded kernel again and
compares, so a TileLang that stopped answering the same is seen.

``SEPTRAN_TEST_LOWERING`` (as with ``SEPTRAN_TEST_NVCC`` for nvcc, support/cuda_tools.py):
- unset: read the records; a miss lowers through TileLang.
- ``fresh``: ignore the records (the suite as it ran before them).
- ``record``: lower what misses and stage every kernel the run used (hit or miss) under
  ``tests/golden/.lowered.staging/``; then ``python tests/support/lowering_records.py pack`` adds the staged
  records to ``tests/golden/lowered.json.xz`` (commit it). After a whole run, ``SEPTRAN_TEST_LOWERING=record
  make test``, ``pack --prune`` keeps only the records the run used: those of this CPU's programs only (the cpu
  mappings' ``shape_points`` give an Intel CPU other programs than an AMD one), so prune only what both families'
  runs have staged. Run it with an empty ``SEPTRAN_CACHE_DIR``:
  a kernel the build cache already holds never reaches TileLang, so it is neither read nor staged.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import sys
import threading
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RECORDS = GOLDEN / "lowered.json.xz"
STAGING = GOLDEN / ".lowered.staging"
_lock = threading.Lock()
_records: dict | None = None
stats = {"hits": 0, "misses": 0}


def key(job) -> str:
    """The hash of everything TileLang's C of ``job`` depends on."""
    from septran.version import tilelang_version

    t = job.target
    facts = {"tilelang": tilelang_version(), "name": job.program.name,
             "target": t.tilelang_target if isinstance(t.tilelang_target, str) else dict(t.tilelang_target),
             "pass_configs": {k: str(v) for k, v in dict(t.pass_configs).items()}}
    text = json.dumps(facts, sort_keys=True, default=str) + "\0" + job.text("tilelang")
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def records() -> dict:
    global _records
    with _lock:
        if _records is None:
            try:
                _records = json.loads(lzma.decompress(RECORDS.read_bytes()))["records"]
            except (OSError, ValueError, KeyError, lzma.LZMAError):
                _records = {}
        return _records


def warm_cache_problem() -> str | None:
    """``record`` mode stages only what the run lowers or reads from the records, and a kernel whose binary the
    build cache holds is neither: on a warm cache ``pack --prune`` would drop its record without a word (a later
    fresh clone then lowers it through TileLang, minutes of CI). So record mode needs an empty cache: what is
    wrong, or None."""
    if os.environ.get("SEPTRAN_TEST_LOWERING") != "record" or os.environ.get("SEPTRAN_TEST_RECORD_CHECKED"):
        return None  # (a pytest a test starts, on the cache its parent run is filling)
    os.environ["SEPTRAN_TEST_RECORD_CHECKED"] = "1"
    from septran import env

    cache = env.cache_dir()
    if cache.is_dir() and any(cache.iterdir()):
        return (f"SEPTRAN_TEST_LOWERING=record needs an empty build cache, and {cache} holds entries: run it with "
                f"SEPTRAN_CACHE_DIR (and TILELANG_CACHE_DIR) set to new, empty folders")
    return None


def install() -> None:
    """Stands the records in for TileLang at ``tilelang_api.device_source_of`` in this process (the mode permitting)."""
    mode = os.environ.get("SEPTRAN_TEST_LOWERING", "")
    if mode == "fresh":
        return
    from septran.build import tilelang_api

    lower = tilelang_api.device_source_of

    def recorded(job) -> str:
        k = key(job)
        c = records().get(k)
        if c is None:
            stats["misses"] += 1
            c = lower(job)
        else:
            stats["hits"] += 1
        if mode == "record":
            _stage(k, c)
        return c

    recorded.lower = lower  # TileLang's own, for the test that compares
    tilelang_api.device_source_of = recorded


def child_env(env: dict) -> dict:
    """``env`` for a child process a test starts, with the records stood in there too (child_site/)."""
    site = str(Path(__file__).resolve().parent / "child_site")
    return dict(env, PYTHONPATH=os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p))


def _stage(k: str, c: str) -> None:
    STAGING.mkdir(exist_ok=True)
    path = STAGING / f"{k}.c"
    if not path.exists():
        tmp = STAGING / f".{k}.{os.getpid()}.{threading.get_ident()}.tmp"  # (threads of one process record at once)
        tmp.write_text(c)
        os.replace(tmp, path)


def pack(prune: bool) -> int:
    """Writes the staged records to ``RECORDS``, with the ones already there unless ``prune`` (after a whole
    run: then the records no kernel used go); returns how many it holds."""
    from septran.version import tilelang_version

    held = {} if prune else dict(records())
    held.update({p.stem: p.read_text() for p in sorted(STAGING.glob("*.c"))})
    data = json.dumps({"what": "TileLang's device source per kernel, by key (tests/support/lowering_records.py)",
                       "tilelang": tilelang_version(), "records": held}, sort_keys=True)
    RECORDS.write_bytes(lzma.compress(data.encode(), preset=9 | lzma.PRESET_EXTREME))
    for p in STAGING.iterdir():
        p.unlink()
    STAGING.rmdir()
    return len(held)


if __name__ == "__main__":
    if sys.argv[1:] not in (["pack"], ["pack", "--prune"]):
        sys.exit("usage: python tests/support/lowering_records.py pack [--prune]")
    print(f"{pack('--prune' in sys.argv)} records in {RECORDS}")
