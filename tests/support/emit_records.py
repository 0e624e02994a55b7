"""TileLang's device-source lowering, recorded: which exact TileLang sources it lowered without an error.

The matrix (test_issue22_matrix.py) emits about 250 GPU kernels whose device source only has to exist; TileLang's
lowering was four fifths of those cells' time, and a fresh clone has no cache. As with nvcc's answers
(support/cuda_tools.py), a record holds only for the exact source SepTran emitted, the target and TileLang's
version (its key is their hash): a kernel whose source changed is lowered again. ``SEPTRAN_TEST_NVCC=record``
adds the keys a run lowered to ``tests/golden/emitted.json`` (commit it); ``=fresh`` ignores the records.
SepTran's own part of each cell (tracing, lowering, verify, emitting, every refusal) always runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from septran.version import tilelang_version

RECORDS = Path(__file__).resolve().parents[1] / "golden" / "emitted.json"
_lock = threading.Lock()
_known: set | None = None
_new: set = set()


def key(tilelang_source: str, target: str) -> str:
    return hashlib.sha256("\0".join((tilelang_source, target, tilelang_version())).encode()).hexdigest()[:32]


def _records() -> set:
    global _known
    if _known is None:
        try:
            _known = set(json.loads(RECORDS.read_text())["keys"])
        except (OSError, ValueError, KeyError):
            _known = set()
    return _known


def emitted(variant, target: str) -> bool:
    """True once ``variant``'s device source exists: read from the records, else lowered by TileLang (which
    raises what it raises) and remembered for ``SEPTRAN_TEST_NVCC=record``."""
    mode = os.environ.get("SEPTRAN_TEST_NVCC", "")
    k = key(variant.tilelang_source, target)
    if mode != "fresh" and k in _records():
        return True
    ok = bool(variant.device_source)
    if ok and mode == "record":
        with _lock:
            _new.add(k)
            _write()
    return ok


def _write() -> None:
    keys = sorted(_records() | _new)
    tmp = RECORDS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"what": "keys of TileLang sources whose device source TileLang lowered "
                                       "(tests/support/emit_records.py)", "keys": keys}, indent=0) + "\n")
    os.replace(tmp, RECORDS)
