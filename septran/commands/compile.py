"""``septran compile LOGIC [MAPPING] --input ... [--dump DIR]``: lowers, emits and builds the variant for these
shapes. With ``--dump DIR`` every stage is written there, named as SEPTRAN_DUMP_DIR names them
(``<variant>.<NN>-<pass>.txt``, ``<variant>.tilelang.py``) and, from the build, each stage the target's builder
keeps (``<variant>.build.<stage>.<ext>``: the tile text, the TileLang source, the device source, the binary).
Without it, the TileLang program is printed. ``--no-build`` stops before the binary (device source only)."""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from septran.commands.kernels import add_kernel_arguments, head, lowering_stages, print_json, variant_for
from septran.env import SettingError
from septran.paths import check_user_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_kernel_arguments(parser)
    parser.add_argument("--dump", metavar="DIR", help="write every stage into DIR")
    parser.add_argument("--no-build", action="store_true", help="stop at the device source (no compiler runs)")


def run(args) -> int:
    folder = _folder(args.dump) if args.dump else None
    kernel, variant, _ = variant_for(args)
    start = time.perf_counter()
    if args.no_build:
        variant.device_source  # noqa: B018 - made and cached (TileLang lowers it; nothing is compiled)
    else:
        variant.build()
    seconds = time.perf_counter() - start
    written = []
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in lowering_stages(kernel, variant):
            path = folder / (f"{variant.tag}.tilelang.py" if name == "tilelang" else f"{variant.tag}.{name}.txt")
            path.write_text(text)
            written.append(path)
        job = variant.job
        for stage in job.builder.stages:
            source = job.path(stage.name)
            if source.is_file():
                suffix = source.suffix if source.suffix != f".{stage.name}" else ""
                path = folder / f"{variant.tag}.build.{stage.name}{suffix}"
                shutil.copyfile(source, path)
                written.append(path)
    result = {**head(kernel, variant), "built": not args.no_build, "seconds": seconds,
              "files": [str(p) for p in written], "source": str(variant.source_path)}
    if args.json:
        print_json(result)
    elif folder is None:
        print(variant.tilelang_source, end="")
    else:
        print(f"{variant.tag}: {len(written)} files in {folder}" + ("" if args.no_build else f" (built in {seconds:.2f} s)"))
        for p in written:
            print(f"  {p.name}")
    return 0


def _folder(value: str) -> Path:
    path = Path(check_user_path(value, "--dump", SettingError))
    if path.exists() and not path.is_dir():
        raise SettingError(f"--dump {value!r} is a file, not a folder", hint="name a folder (it is created if missing)")
    return path
