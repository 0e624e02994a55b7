"""A DSA vendor's C library: built once per content, shared by the kernels and by SepTran.

The library is built as a shared object in the cache, loaded into this
process with RTLD_GLOBAL, and linked (by absolute path) into every kernel of
the target, so the kernels and SepTran see one device state: SepTran asks it
for errors after each call, and tests switch its debug mode.

The library's name hashes what it is built from (its sources, the headers
beside them, the flags); a sidecar ``<lib>.sha256``, written after the library,
holds the hash of the library itself. A library that does not match it
(truncated, overwritten; loading one can crash the process with SIGBUS) is
rebuilt, with a warning, before it is loaded.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

from septran import env
from septran.errors import BuildError, DeviceError
from septran.runtime import integrity
from septran.target import Target, Vendor

log = logging.getLogger(__name__)


def _inputs_digest(sources: tuple[Path, ...], cflags: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    headers = sorted({h for src in sources for h in src.parent.glob("*.h")})
    for path in (*sources, *headers):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(" ".join(cflags).encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _built(sources: tuple[Path, ...], cflags: tuple[str, ...]) -> Path:
    folder = env.cache_dir() / "vendor"
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"lib{sources[0].stem}_{_inputs_digest(sources, cflags)}.so"
    why = integrity.problem(lib)
    if why is None:
        return lib
    if lib.exists():
        log.warning("cached vendor library %s %s; rebuilding it", lib, why)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{lib.name}.", suffix=".so")
    os.close(fd)
    cmd = ["gcc", "-std=c11", "-O2", "-fPIC", "-shared", *map(str, sources), *cflags, "-o", tmp]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        os.unlink(tmp)
        raise BuildError(f"building the vendor library failed: {' '.join(cmd)}\n{done.stderr}")
    digest = integrity.sha256_file(Path(tmp))
    # The library first, then its hash: a reader between the two sees a mismatch and rebuilds, never trusts a
    # half-written file. A process that mapped the old library keeps its inode (replace, never overwrite).
    os.replace(tmp, lib)
    integrity.record(lib, digest)
    return lib


def library_path(vendor: Vendor) -> Path:
    return _built(vendor.sources, vendor.cflags)


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def library(target: Target) -> ctypes.CDLL:
    return _load(library_path(target.vendor))


def link_flags(target: Target) -> list[str]:
    """What the kernel build adds to link the vendor library (loaded first, so both share its state)."""
    if target.vendor is None:
        return []
    path = library_path(target.vendor)
    library(target)
    return [str(path), f"-Wl,-rpath,{path.parent}"]


def check_errors(target: Target, kernel_name: str) -> None:
    """Raises DeviceError with the vendor's message if the last call left an error."""
    if target.vendor is None:
        return
    lib = library(target)
    buf = ctypes.create_string_buffer(1024)
    take = getattr(lib, target.vendor.take_error)
    take.restype = ctypes.c_int32
    code = take(buf, ctypes.c_int32(len(buf)))
    if code:
        raise DeviceError(f"{kernel_name} on {target.name}: {buf.value.decode(errors='replace')} (vendor error {code})")


def set_debug(target: Target, on: bool) -> None:
    """Switches the vendor library's debug mode (reports of reads before a transfer was synchronised)."""
    fn = getattr(library(target), target.vendor.set_debug)
    fn(ctypes.c_int32(1 if on else 0))


def debug_violations(target: Target) -> int:
    fn = getattr(library(target), target.vendor.debug_violations)
    fn.restype = ctypes.c_int32
    return int(fn())
