"""``septran targets``: every target SepTran knows (shipped and registered), with what a mapping may name on it:
processors and the memories each reaches, memories, leaf implementations, dtypes, copy options, threads."""
from __future__ import annotations

import argparse

from septran.commands.kernels import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="*", help="only these targets (default: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON array, one object per target")


def describe(target) -> dict:
    """A target as data: what ``septran targets`` prints."""
    return {
        "name": target.name,
        "description": target.description,
        "folder": str(target.folder),
        "torch_device": target.torch_device,
        "builder": target.builder,
        "processors": {p.name: {"memories": list(p.memories), "grid": p.grid, "schedules": list(p.schedules)}
                       for p in target.procs.values()},
        "memories": {m.name: {"alloc": m.alloc, "capacity_bytes": m.capacity_bytes, "placed": m.placed}
                     for m in target.memories.values()},
        "leaves": {leaf.name: {"implements": list(leaf.implements), "meaning": leaf.meaning} for leaf in target.leaves.values()},
        "dtypes": list(target.dtypes),
        "copy_options": ["via", *target.copy_options],
        "threads": None if not target.has_threads else {
            "max": target.max_threads, "multiple_of": target.thread_multiple, "default": target.default_threads},
        "combine": [c for c, on in (("atomic", target.atomic_add), ("two_kernels", target.two_kernels)) if on],
    }


def run(args) -> int:
    from septran.target import TargetError, available_targets, check_target_name, load_target

    names = args.name or available_targets()
    for name in names:
        check_target_name(name, source="on the command line", error=TargetError)
    rows = [describe(load_target(name)) for name in names]
    if args.json:
        print_json(rows)
        return 0
    for k, row in enumerate(rows):
        print(("\n" if k else "") + f"{row['name']}: {row['description']}")
        print(f"  device {row['torch_device']}, builder {row['builder']}, dtypes: {', '.join(row['dtypes'])}")
        if row["threads"]:
            t = row["threads"]
            print(f"  threads: a multiple of {t['multiple_of']} up to {t['max']}"
                  + (f", {t['default']} where the mapping names none" if t["default"] else ""))
        for name, p in row["processors"].items():
            print(f"  proc {name}: memories {', '.join(p['memories'])}" + (" (launches the grid)" if p["grid"] else "")
                  + (f"; schedules {', '.join(p['schedules'])}" if p["schedules"] else ""))
        for name, m in row["memories"].items():
            size = f", {m['capacity_bytes']} bytes a program" if m["capacity_bytes"] else ""
            print(f"  memory {name}: {m['alloc'] or 'the kernel arguments'}{size}" + (" (placed)" if m["placed"] else ""))
        for name, leaf in row["leaves"].items():
            print(f"  leaf {name} ({', '.join(leaf['implements'])}): {leaf['meaning']}")
        print(f"  copy options: {', '.join(row['copy_options'])}")
        if row["combine"]:
            print(f"  combine: {', '.join(row['combine'])}")
    return 0
