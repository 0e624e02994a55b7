"""A DSA vendor's C library: built once per content, shared by the kernels and by SepTran.

The library is built as a shared object in the cache, loaded into this
process with RTLD_GLOBAL, and linked into every kernel of the target (by its
soname; a kernel SepTran builds finds it beside itself, ``$ORIGIN/../vendor``,
so a cache folder moved elsewhere still loads), so the kernels and SepTran see
one device state: SepTran asks it for errors after each call
(``runtime/vendor.py``), and tests switch its debug mode.

A vendor library may link third-party shared libraries found inside installed
Python distributions (``vendor.libraries``: located, never imported), and may
name headers that every kernel of the target force-includes (``vendor.include``).

The library's name hashes what it is built from (its sources, the headers
beside them and those it force-includes, the flags, the path, size and mtime of
each third-party library); a sidecar ``<lib>.sha256``, written after the library,
holds the hash of the library itself. A library that does not match it
(truncated, overwritten; loading one can crash the process with SIGBUS) is
rebuilt, with a warning, before it is loaded.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import logging
from pathlib import Path

from septran import env
from septran.build import shared_lib, toolchain
from septran.errors import BuildError
from septran.target import Target, Vendor, VendorLibrary

log = logging.getLogger(__name__)


def _library_file(lib: VendorLibrary) -> Path:
    """A third-party library's path inside its installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(lib.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"the vendor library links against {lib.file} from the Python package {lib.package!r}, "
                         f"which is not installed: pip install {lib.dist}")
    path = Path(spec.submodule_search_locations[0]) / lib.file
    if not path.is_file():
        raise BuildError(f"{path} is missing from the installed package {lib.package!r}: "
                         f"pip install --force-reinstall {lib.dist}")
    return path


def _inputs_digest(sources: tuple[Path, ...], cflags: tuple[str, ...], libraries: tuple[Path, ...],
                   include: tuple[Path, ...], native: str = "") -> str:
    digest = hashlib.sha256()
    headers = sorted({h for src in sources for h in src.parent.glob("*.h")} | set(include))
    for path in (*sources, *headers):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(" ".join(cflags).encode())
    for lib in libraries:  # a different build of the library (another wheel version) rebuilds ours
        st = lib.stat()
        digest.update(f"\0{lib}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    if native:  # -march=native: what it means on this CPU, not its text
        digest.update(b"\0" + native.encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _built(sources: tuple[Path, ...], cflags: tuple[str, ...], libraries: tuple[Path, ...],
           include: tuple[Path, ...]) -> Path:
    # The YAML's cflags come after the defaults, so they add to them or override them (-O3 after -O2).
    rpaths = [f"-Wl,-rpath,{d}" for d in dict.fromkeys(p.parent for p in libraries)]
    log.info("the vendor library lib%s", sources[0].stem)
    name, digest = f"lib{sources[0].stem}", _inputs_digest(sources, cflags, libraries, include, toolchain.native_flags(cflags) or "")
    return shared_lib.built(
        "vendor", name, digest,
        lambda out, _: ["gcc", "-std=c11", "-O2", "-fPIC", "-shared", f"-Wl,-soname,{name}_{digest}.so", *map(str, sources),
                        *cflags, *map(str, libraries), *rpaths, "-o", out],
        "vendor library")


@functools.lru_cache(maxsize=None)
def library_path(vendor: Vendor) -> Path:
    return _built(vendor.sources, vendor.cflags, tuple(map(_library_file, vendor.libraries)), vendor.include)


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def library(target: Target) -> ctypes.CDLL:
    return _load(library_path(target.vendor))


def load(target: Target) -> None:
    """Loads the target's vendor library, if it has one, before a kernel that links it."""
    if target.vendor is not None:
        library(target)


def folder() -> Path:
    """Where vendor libraries are kept (kernels find theirs relative to themselves)."""
    return env.cache_dir() / "vendor"


def digest(target: Target) -> str:
    """The vendor library's digest (what it is built from, headers included): part of every kernel's build key."""
    return "" if target.vendor is None else library_path(target.vendor).stem.rsplit("_", 1)[-1]


def link_flags(target: Target, rpath: str = "") -> list[str]:
    """What the kernel build adds: the vendor library (loaded first, so both share its state) and the headers
    every kernel force-includes. TileLang keys its kernel cache on these flags, so the library's digest (which
    covers the headers) is one of them: a changed header builds the kernels anew. ``rpath``: where a kernel
    finds the library at run time (default: its folder, absolute)."""
    if target.vendor is None:
        return []
    path = library_path(target.vendor)
    library(target)
    flags = [str(path), f"-Wl,-rpath,{rpath or path.parent}", f"-DSEPTRAN_VENDOR_DIGEST={digest(target)}"]
    for header in target.vendor.include:
        flags += ["-include", str(header)]
    spaced = [f for f in flags if any(c.isspace() for c in f)]
    if spaced:  # TileLang splits each compile flag at whitespace
        raise BuildError(f"the kernel build cannot take paths with whitespace: {', '.join(map(repr, spaced))}")
    return flags
