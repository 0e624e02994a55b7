"""What ``septran explain``, ``compile`` and ``run`` share: the logic and mapping arguments, the kernel they make,
its variant for the ``--input`` shapes, and every stage of that variant's lowering and build."""
from __future__ import annotations

import argparse
import json
from typing import Optional

from septran.inputs import add_input_options, check_inputs, described, parse_inputs, parse_scalars


def add_kernel_arguments(parser: argparse.ArgumentParser, mapping_help: Optional[str] = None) -> None:
    parser.add_argument("logic", help="the logic file")
    parser.add_argument("mapping", nargs="?", help=mapping_help or "the mapping file (default: SEPTRAN_MAPPING, else "
                        "mappings/<target>/<op>.yaml for the target)")
    parser.add_argument("--target", help="the target (default: the mapping's, else SEPTRAN_TARGET, else this machine's)")
    add_input_options(parser)
    parser.add_argument("--json", action="store_true", help="end with one JSON object")


def kernel_for(args):
    """The kernel of ``args.logic`` and ``args.mapping`` (through the front door, as a script would compile it)."""
    import septran

    return septran.compile(logic_file=args.logic, mapping_file=args.mapping, target=args.target)


def variant_for(args, check=None):
    """(kernel, variant, inputs) for the command's --input shapes and --scalar values: every mistake a SepTranError.
    ``check(kernel)``: the command's own refusals, before anything is lowered."""
    inputs = parse_inputs(args.input)
    kernel = kernel_for(args)
    if check is not None:
        check(kernel)
    check_inputs(kernel, inputs)
    scalars = parse_scalars(args.scalar)
    given = described(kernel, inputs)
    return kernel, kernel.specialize(**given, **scalars), inputs


def lowering_stages(kernel, variant) -> list[tuple[str, str]]:
    """Each pass's output for this variant, in order (what SEPTRAN_DUMP_DIR receives), then the tile program as
    ``explain()`` gives it and the TileLang source. The lowering runs again with a collecting dump: it is cheap
    and deterministic, and builds nothing."""
    from septran.lowering import lower

    out: list[tuple[str, str]] = []
    lower(kernel.graph, variant.choice.mapping, kernel.target, variant.spec, kernel.shapes,
          dump=lambda name, make: out.append((name, make())), checked=True)
    return out + [("06-tileprogram", variant.explain()), ("tilelang", variant.tilelang_source)]


def head(kernel, variant) -> dict:
    return {"kernel": kernel.signature(), "target": kernel.target.name, "mapping": str(kernel.mapping.file),
            "variant": variant.tag, "point": dict(variant.choice.point), "point_source": variant.choice.source,
            "shapes": {n: list(s) for n, s in variant.spec.shapes.items()}, "dtypes": dict(variant.spec.dtypes)}


def print_json(value) -> None:
    print(json.dumps(value, sort_keys=True, default=str))
