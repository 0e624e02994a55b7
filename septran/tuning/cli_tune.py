"""``septran tune LOGIC MAPPING --input A=1024x1024:float32 ...``: tune a mapping's search space for some shapes.

With ``--json`` the last line printed is one JSON object: ``best`` (each
``!tune`` key's value by its path in the mapping), ``best_s`` and ``first_s``
(median seconds of the best point and of the space's first point),
``space``, ``pruned``, ``measured`` (points timed in this run) and ``cached``
(the answer came from the database). Without it, a table.
"""
from __future__ import annotations

import argparse
import json

# The --input, --scalar and count options every command shares (septran.inputs); re-exported here.
from septran.inputs import (  # noqa: F401
    add_input_options, at_least as _at_least, check_inputs, parse_inputs, parse_scalars,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logic", help="the logic file")
    parser.add_argument("mapping", help="the mapping file with !tune values")
    add_input_options(parser)
    parser.add_argument("--budget", type=_at_least(1), help="points to measure at most (default: all of a space of <= 64, else a third)")
    parser.add_argument("--jobs", type=_at_least(1), help="parallel builds (default: the cores)")
    parser.add_argument("--sampler", choices=("tpe", "evolution"), default="tpe", help="the guided search's sampler")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="measure again even when the database has an answer")
    parser.add_argument("--db", metavar="PATH", help="the tuning database (default: SEPTRAN_TUNING_DB)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    parser.add_argument("--ray", action="store_true", help="compile trials as Ray tasks (pip install 'septran[distributed]')")
    parser.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster (default: a local one)")


def run(args) -> int:
    import septran
    from septran.records.db import TuningDB

    inputs = parse_inputs(args.input)
    kernel = septran.compile(logic_file=args.logic, mapping_file=args.mapping)
    check_inputs(kernel, inputs)
    result = septran.tune(kernel, inputs, scalars=parse_scalars(args.scalar), budget=args.budget,
                          jobs=args.jobs, db=TuningDB(args.db) if args.db else None, force=args.force,
                          progress=not args.json, sampler=args.sampler, seed=args.seed,
                          ray=args.ray, ray_address=args.ray_address)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
        return 0
    print(f"search space: {result.space} points, {result.pruned} pruned statically, {result.measured} measured"
          + (" (from the tuning database)" if result.cached else ""))
    from septran.records.shown import shown  # a point from the tuning database: its text escaped

    for path, value in result.best.items():
        print(f"  {shown(path)} = {shown(value)}")
    if result.best_s is not None:
        line = f"best: {result.best_s * 1e3:.3f} ms"
        if result.first_s:
            line += f"; first point: {result.first_s * 1e3:.3f} ms; speed-up {result.first_s / result.best_s:.2f}x"
        print(line)
    for rule, n in list(result.rules.items())[:5]:
        print(f"  pruned {n:5d}  {shown(rule)}")
    if result.correlation is not None:
        print(f"cost model rank correlation with the measured times: {result.correlation:.2f}")
    return 0
