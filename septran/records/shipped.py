"""The tuning database that ships with SepTran: ``septran/tuned/<target>.jsonl``, read after the user's.

Offline tuning (design.md section 8): ``septran tune-model <model> --ship``
tunes a model's prefill and decode kernels on one machine and writes each
tuning key's winner here. The file is read-only at run time. A record is
used only where its whole key matches (the logic file's hash, the search
space's hash, the target, the device identity: the CPU model, its codegen
flags and core count, the dtypes, the shapes and shape bucket, the SepTran
and TileLang versions), so a record made on another CPU or for another
version of a kernel simply never matches: safe by construction. One file
holds records of several CPUs; the key's device picks.

``SEPTRAN_SHIPPED_TUNING=0`` turns it off (the test suite does, so that its
kernels do not depend on the machine CI runs on).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from septran import env
from septran.records.db import TuningDB
from septran.records.device import device_string
from septran.records.key import septran_version
from septran.records.record import TuningRecord
from septran.version import tilelang_version

log = logging.getLogger(__name__)

FOLDER = Path(__file__).resolve().parents[1] / "tuned"  # septran/tuned, package data of the wheel

_OPEN: dict[str, TuningDB] = {}  # one reader per file: its index is read once per process


def path(target: str) -> Path:
    """The shipped database of a target (``cpu``: ``septran/tuned/cpu.jsonl``)."""
    return FOLDER / f"{target}.jsonl"


def shipped_db(target: str) -> Optional[TuningDB]:
    """The target's shipped database, or None: turned off (``SEPTRAN_SHIPPED_TUNING=0``) or none ships."""
    if not env.shipped_tuning():
        return None
    file = path(target)
    if not file.is_file():
        return None
    key = str(file)
    if key not in _OPEN:
        _OPEN[key] = TuningDB(file)
    return _OPEN[key]


def shipped_name(db: TuningDB) -> str:
    """How a choice's source names the file: relative to the package (``septran/tuned/cpu.jsonl``)."""
    try:
        return str(Path("septran") / Path(db.path).resolve().relative_to(FOLDER.parent))
    except ValueError:
        return str(db.path)


def merge(file: Path, winners: Iterable[TuningRecord], replaced: set[str]) -> dict:
    """Rewrites ``file`` (atomically): every record it holds, but those of a key in ``replaced`` (key digests
    tuned now, this device's) and those of another SepTran or TileLang version (no running SepTran can match them),
    then ``winners``. Other CPUs' records and other models' stay. Sorted by device, op and key, so that a
    regenerated file differs from the last only where its records do. Returns counts for the report."""
    winners = list(winners)
    old = TuningDB(file).all() if file.is_file() else []
    versions = (septran_version(), tilelang_version())
    stale = [r for r in old if (r.key.septran_version, r.key.tilelang_version) != versions]
    dead = {id(r) for r in stale}
    kept = [r for r in old if r.key.digest() not in replaced and id(r) not in dead]
    records = sorted(kept + winners, key=lambda r: (device_string(dict(r.key.device)), r.op, r.key.digest(),
                                                      r.point_id))
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for r in records:
                out.write(r.to_line())
        os.chmod(tmp, 0o644)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _OPEN.pop(str(file), None)
    devices = {device_string(dict(r.key.device)) for r in records}
    log.info("%s: %d records (%d kept, %d written, %d of other versions dropped), %d device(s)",
             file, len(records), len(kept), len(winners), len(stale), len(devices))
    return {"path": str(file), "records": len(records), "kept": len(kept), "written": len(winners),
            "dropped_stale": len(stale), "replaced": len(old) - len(kept) - len(stale), "devices": len(devices)}
