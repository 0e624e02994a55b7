"""A precompiled header for the ``c`` builder: the headers every kernel parses, parsed once per toolchain.

Why: a kernel's C is a few hundred lines, but it includes TileLang's
``tl_templates/cpp/common.h`` (and the vendor's force-included headers); g++
spends nearly all of a kernel's build parsing them (measured: 1.9 s of user
time for the 96x80 GEMM at -O3, the same 1.9 s for ``-fsyntax-only`` of the
header alone). A model, a tuning run or the test suite builds hundreds of
kernels, so the headers are compiled once into ``septran_pch.h.gch`` and every
kernel's build starts from it (``-include septran_pch.h``, first).

What stays the same: ``septran_pch.h`` includes exactly what the kernel did
before, in the same order (the vendor's force-included headers, then
TileLang's ``common.h``), so the kernel's own ``#include`` and the later
``-include`` flags are no-ops (``#pragma once``, include guards). g++ uses the
``.gch`` only where it was made with the same flags and macros, and otherwise
reads ``septran_pch.h`` as text: a stale or damaged ``.gch`` costs time, never
correctness. The header's folder is named by the hash of everything that goes
into it (compiler, what ``-march=native`` resolves to, flags, macros, the
header's text, TileLang's version), made in a temporary folder and renamed into
place, so concurrent builds never see half of it. If it cannot be made, kernels
build without it (a warning, once).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from septran import env
from septran.build import shared_lib, toolchain
from septran.errors import BuildError
from septran.version import tilelang_version

log = logging.getLogger(__name__)

HEADER = "septran_pch.h"


def header(compile_flags: tuple[str, ...], vendor_flags: tuple[str, ...]) -> Optional[Path]:
    """The header to ``-include`` first (its ``.gch`` beside it), or None where none could be made.

    ``compile_flags``: the target's (-O3, -march=native, ...); ``vendor_flags``: ``vendor.link_flags`` (its
    ``-include`` headers go into the precompiled header, its macros are defined when it is made)."""
    digest, text, command = _plan(tuple(compile_flags), tuple(vendor_flags), toolchain.cxx(), toolchain.tilelang_templates())
    folder = env.cache_dir() / "pch" / digest  # looked up each time: the cache folder may change in a process
    path = folder / HEADER
    if (folder / (HEADER + ".gch")).is_file() and path.is_file():
        return path
    try:
        _make(folder, text, command)
    except (BuildError, OSError) as err:
        log.warning("no precompiled header for the kernels (each build parses TileLang's headers): %s", err)
        return None
    return path


@functools.lru_cache(maxsize=None)
def _plan(compile_flags: tuple[str, ...], vendor_flags: tuple[str, ...], cxx: str, templates: str) -> tuple[str, str, list]:
    """(the header's hash, its text, the command that compiles it but for its file names)."""
    includes = [vendor_flags[k + 1] for k, f in enumerate(vendor_flags) if f == "-include"]
    macros = [f for f in vendor_flags if f.startswith("-D")]
    # Only what changes how the headers compile: no libraries, no linker flags, no -shared.
    flags = [f for f in compile_flags if f.startswith(("-O", "-m", "-f", "-D", "-U", "-std"))] + macros
    text = "// What every kernel of this target parses first, compiled once (septran/build/precompiled.py).\n" + "".join(
        f'#include "{h}"\n' for h in includes) + "#include <tl_templates/cpp/common.h>\n"
    facts = {"cxx": toolchain.compiler_facts()["version"], "native": toolchain.native_flags(compile_flags) or "",
             "flags": flags, "text": text, "tilelang": tilelang_version(),
             "templates": os.path.realpath(templates),  # TileLang's own spelling once imported: 3rdparty/../src
             "headers": [hashlib.sha256(Path(h).read_bytes()).hexdigest() for h in includes if Path(h).is_file()]}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return digest, text, [cxx, "-std=c++17", "-fPIC", "-fopenmp", *flags, f"-I{templates}", "-x", "c++-header"]


def _make(folder: Path, text: str, command: list[str]) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        (tmp / HEADER).write_text(text)
        shared_lib.run_compiler([*command, str(tmp / HEADER), "-o", str(tmp / (HEADER + ".gch"))], "the precompiled header")
        try:
            os.rename(tmp, folder)  # whole or not at all; another process may have put it there first
        except OSError:
            if not (folder / (HEADER + ".gch")).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def discard(path: Path) -> None:
    """Removes a precompiled header a build failed with (the next build makes it anew), with a warning."""
    log.warning("a kernel failed to build with the precompiled header %s; removing it and building without", path)
    shutil.rmtree(path.parent, ignore_errors=True)
