"""A launcher's shared library: built with g++ and cached like the kernels (``septran.build.store.Entries``).

The key hashes the launcher's source, the compiler's version and what ``-march=native`` resolves to on this CPU,
and SepTran's version; the entry is bound to its key by its sidecar, so a swapped or damaged library is rebuilt,
never run. The source names no address (the kernels' entry points are passed per call), so every process, every
graph with the same segment and every cache length finds the same entry.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import threading
from pathlib import Path

from septran.build import shared_lib, toolchain
from septran.build.store import Entries
from septran.version import __version__

log = logging.getLogger(__name__)
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-march=native", "-fopenmp")  # OpenMP: large copies
FUNCTION = "septran_segment"
BUILDS = [0]  # launchers compiled in this process (tests count them)
_LOCK = threading.Lock()


def key(source: str) -> str:
    facts = {"septran": __version__, "flags": list(FLAGS), "cxx": toolchain.compiler_facts()["version"],
             "native": toolchain.native_flags(FLAGS)}
    text = json.dumps(facts, sort_keys=True)
    return hashlib.sha256(f"launcher\0{text}\0{source}".encode()).hexdigest()


def built(name: str, digest: str, source: str, ext: str, command, what: str, builds: list = BUILDS) -> Path:
    """The library ``command(src, out)`` compiles from ``source``, kept as the cache entry (launcher, ``name``,
    ``digest``): built where no trusted entry holds it (``builds`` counts the compiles; the GPU launcher's
    ``cuda_build`` keeps its own count)."""
    entries = Entries("launcher", name, digest)
    with _LOCK:
        if entries.check("so", what) is None:
            out, src = entries.temporary("so"), entries.temporary(ext)
            try:
                src.write_text(source)
                shared_lib.run_compiler(command(src, out), f"a {what}")
                entries.adopt("so", out)
                builds[0] += 1
                log.info("septran: built a %s %s", what, entries.path("so").name)
            finally:
                for path in (out, src):
                    path.unlink(missing_ok=True)
    return entries.path("so")


def load(source: str):
    """(library, its C function): ctypes, ``(F, P, S) -> int32``; built if no trusted entry holds it. Keep the
    library while the function is used."""
    path = built("segment", key(source), source, "cpp",
                 lambda src, out: [toolchain.cxx(), *FLAGS, str(src), "-o", str(out)], "segment launcher")
    lib = ctypes.CDLL(str(path))
    fn = getattr(lib, FUNCTION)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int32
    return lib, fn
