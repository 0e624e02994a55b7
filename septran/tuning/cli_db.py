"""``septran db list`` and ``septran db export``: the tuning database, read-only.

``list`` groups the records by key (one row per logic, space, target,
device, shapes, dtypes, scalars and versions) and shows each group's best
point; ``export`` copies the records to another file, as JSON lines or CSV.
Neither ever changes the database.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from septran.env import SettingError
from septran.paths import check_user_path
from septran.records.db import TuningDB, best_of
from septran.records.shown import shown
from septran.records.device import device_label, device_string
from septran.records.key import canonical_json
from septran.records.record import TuningRecord

CSV_COLUMNS = (
    "key", "op", "logic_hash", "space_hash", "target", "device", "dtypes", "shapes", "scalars",
    "septran_version", "tilelang_version", "point_id", "point", "status", "rule", "median_s",
    "timings", "timing", "features", "created", "host",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH", help="the database file (default: SEPTRAN_TUNING_DB, else tuning.jsonl in the cache folder)")
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="one row per tuning key with its best point")
    export = sub.add_parser("export", help="copy the records to another file")
    for p in (listing, export):
        p.add_argument("--target", help="only records of this target")
        p.add_argument("--op", help="only records of this operator (or of a logic hash starting so)")
    listing.add_argument("--json", action="store_true", help="print one JSON array of the rows")
    export.add_argument("path", metavar="PATH", help="the file to write ('-': standard output)")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")


def run(args: argparse.Namespace) -> int:
    db = TuningDB(args.db) if args.db else TuningDB()
    records = select(db.all(), target=args.target, op=args.op)
    if args.db_command == "list":
        rows = summarize(records)
        if args.json:
            print(json.dumps(rows, indent=1))
        elif rows:
            print(format_table(rows))
        else:
            print(f"no tuning records in {shown(db.path)}" + (" match" if args.target or args.op else ""))
        return 0
    return export(db, records, args.path, args.format)


def select(records: list[TuningRecord], target: Optional[str] = None, op: Optional[str] = None) -> list[TuningRecord]:
    """The records of ``target`` and of ``op`` (its name, or a prefix of its logic hash)."""
    return [
        r for r in records
        if (target is None or r.key.target == target)
        and (op is None or r.op == op or r.key.logic_hash.startswith(op))
    ]


def summarize(records: list[TuningRecord]) -> list[dict[str, Any]]:
    """One row per key: the key's fields, the best point (lowest median of the ok trials never found wrong), counts."""
    groups: dict[str, list[TuningRecord]] = {}
    for r in records:
        groups.setdefault(r.key.digest(), []).append(r)
    rows = []
    for digest, group in groups.items():
        key = group[0].key
        best = best_of(group)
        rows.append({
            "key": digest,
            "op": next((r.op for r in group if r.op), ""),
            **key.to_json(),
            "device_label": device_label(dict(key.device)),
            "best": dict(best.point) if best else None,
            "best_point_id": best.point_id if best else None,
            "best_s": best.median_s if best else None,
            "trials": len(group),
            "points": len({r.point_id for r in group}),
            "statuses": dict(sorted(Counter(r.status for r in group).items())),
        })
    rows.sort(key=lambda row: (row["op"], row["target"], canonical_json(row["shapes"]), row["key"]))
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    header = ("op", "logic", "target", "device", "shapes", "dtypes", "best point", "best", "trials")
    table = [header] + [
        (
            row["op"] or "-",
            row["logic_hash"][:8],
            row["target"],
            row["device_label"],
            " ".join(f"{n}={'x'.join(map(str, s))}" for n, s in row["shapes"].items()),
            " ".join(f"{n}:{d}" for n, d in row["dtypes"].items()),
            short_point(row["best"]) if row["best"] is not None else "-",
            seconds(row["best_s"]) if row["best_s"] is not None else "-",
            f"{row['trials']} ({row['statuses'].get('ok', 0)} ok)",
        )
        for row in rows
    ]
    table = [tuple(shown(cell) for cell in line) for line in table]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table)


def short_point(point: dict[str, Any]) -> str:
    """``{"a.tunables.BM": 64, "b.pipeline": 3}`` -> ``BM=64 pipeline=3`` (whole paths where last parts clash)."""
    lasts = Counter(path.rsplit(".", 1)[-1] for path in point)
    return " ".join(f"{path if lasts[path.rsplit('.', 1)[-1]] > 1 else path.rsplit('.', 1)[-1]}={value}"
                    for path, value in sorted(point.items()))


def seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"


def export(db: TuningDB, records: list[TuningRecord], path: str, fmt: str) -> int:
    """Writes ``records`` to ``path`` (never the database itself) as JSON lines or CSV; '-' is standard output."""
    text = export_text(records, fmt)
    if path == "-":
        sys.stdout.write(text)
        return 0
    target = Path(check_user_path(path, "the export file", SettingError))
    if target.is_dir():
        raise SettingError(f"{path!r} is a directory", hint=f"name a file, e.g. {os.path.join(path, 'tuning.jsonl')}")
    if target.exists() and db.path.exists() and target.resolve() == db.path.resolve():
        raise SettingError(f"{path!r} is the tuning database itself", hint="export to another file; records are never rewritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"{len(records)} record(s) written to {shown(target)}", file=sys.stderr)
    return 0


def export_text(records: list[TuningRecord], fmt: str) -> str:
    if fmt == "jsonl":
        return "".join(r.to_line().decode("ascii") for r in records)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        data = r.to_json()
        row = {c: data.get(c) for c in CSV_COLUMNS}
        row["device"] = device_string(data["device"])
        for c in ("dtypes", "shapes", "scalars", "point", "timings", "timing", "features"):
            row[c] = json.dumps(data[c], sort_keys=True, separators=(",", ":"))
        writer.writerow(row)
    return out.getvalue()
