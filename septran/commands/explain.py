"""``septran explain LOGIC [MAPPING] --input A=MxK:dtype``: what SepTran makes of a logic and a mapping for these
shapes, pass by pass: the task graph, the constants and why, the flattened program, the verification, the staged
buffers and copies, ... (each pass's output, as SEPTRAN_DUMP_DIR writes it), then the TileLang program. Builds
nothing. ``--json``: one object with ``stages`` ([{name, text}]) besides the kernel, target, point and shapes."""
from __future__ import annotations

import argparse

from septran.commands.kernels import add_kernel_arguments, head, lowering_stages, print_json, variant_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_kernel_arguments(parser)
    parser.add_argument("--stage", action="append", default=[], metavar="NAME",
                        help="only the stages whose name contains NAME (e.g. verify, stage, tilelang)")


def run(args) -> int:
    kernel, variant, _ = variant_for(args)
    stages = [(n, t) for n, t in lowering_stages(kernel, variant) if not args.stage or any(s in n for s in args.stage)]
    if args.json:
        print_json({**head(kernel, variant), "stages": [{"name": n, "text": t} for n, t in stages]})
        return 0
    print(f"{kernel.signature()} on {kernel.target.name}, mapping {kernel.mapping.file}; point: {variant.choice.source}")
    for name, text in stages:
        print(f"\n== {name} ==")
        print(text.rstrip("\n"))
    return 0
