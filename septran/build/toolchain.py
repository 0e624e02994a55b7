"""Facts about the tools a build uses, found without importing TileLang and, on a warm cache, without running g++.

The build key needs the C++ compiler's version and what ``-march=native``
means on this machine (the CPU features g++ resolves it to: a cache copied to
another machine must not hand it code for instructions it lacks). Asking g++
costs a few milliseconds per question, so the answers are kept per process and
on disk, under a name that hashes what they depend on: the compiler's path,
size and modification time, and the CPU's model name and flags from
/proc/cpuinfo. A record that does not parse is asked again.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Optional

from septran import env
from septran.build import integrity

log = logging.getLogger(__name__)

NATIVE = ("-march=native", "-mcpu=native", "-mtune=native")


@functools.lru_cache(maxsize=None)
def cxx() -> str:
    """The C++ compiler, chosen as TileLang chooses it (tilelang/contrib/cc.py: $CXX, $CC, then g++, clang++, c++)."""
    given = os.environ.get("CXX") or os.environ.get("CC")
    if given:
        return given
    for name in ("g++", "clang++", "c++"):
        for folder in os.get_exec_path():
            path = os.path.join(folder, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return "g++"


@functools.lru_cache(maxsize=None)
def tilelang_templates() -> str:
    """TileLang's C/CUDA template folder (``tilelang/src``, as tilelang/env.py finds it), without importing TileLang."""
    given = os.environ.get("TL_TEMPLATE_PATH")
    if given:
        return given
    spec = importlib.util.find_spec("tilelang")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return str(Path(spec.submodule_search_locations[0]) / "src")


def compiler_facts() -> dict:
    """``{"version": ..., "native": ...}`` of the C++ compiler on this CPU (see the module's docstring)."""
    return dict(_facts(cxx()))


@functools.lru_cache(maxsize=None)
def _facts(compiler: str) -> tuple[tuple[str, str], ...]:
    name = _record_name(compiler)
    folder = env.cache_dir() / "toolchain"
    path = folder / f"{name}.json"
    try:
        facts = json.loads(path.read_text())
        if isinstance(facts, dict) and set(facts) == {"version", "native"} and all(isinstance(v, str) for v in facts.values()):
            return tuple(sorted(facts.items()))
        log.warning("the toolchain record %s is not one SepTran wrote; asking the compiler again", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as err:
        log.warning("the toolchain record %s cannot be read (%s); asking the compiler again", path, err)
    facts = {"version": _run([compiler, "--version"]).split("\n")[0], "native": _native_features(compiler)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        integrity.write_atomic(path, json.dumps(facts, indent=1).encode())
    except OSError as err:  # a read-only cache still builds; it asks again next time
        log.debug("could not keep the toolchain record %s: %s", path, err)
    return tuple(sorted(facts.items()))


def _record_name(compiler: str) -> str:
    """What the answers depend on: the compiler binary (another install, an upgrade) and the CPU."""
    digest = hashlib.sha256()
    try:
        resolved = Path(compiler) if os.sep in compiler else Path(next(
            (os.path.join(d, compiler) for d in os.get_exec_path() if os.path.isfile(os.path.join(d, compiler))), compiler))
        resolved = resolved.resolve()
        st = resolved.stat()
        digest.update(f"{resolved}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except OSError:
        digest.update(compiler.encode())
    digest.update(b"\0" + _cpu().encode())
    return digest.hexdigest()[:16]


def _cpu() -> str:
    """The CPU's model name and feature flags (the first processor's: they are the same for all)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    keep = []
    for line in text.split("\n"):
        k, _, v = line.partition(":")
        if k.strip() in ("model name", "flags", "Features", "CPU part", "isa") and k.strip() not in [x[0] for x in keep]:
            keep.append((k.strip(), v.strip()))
        if not line.strip() and keep:
            break
    return "\n".join(f"{k}: {v}" for k, v in keep)


def _native_features(compiler: str) -> str:
    """What ``-march=native`` turns on: the target options g++ reports with it (``-Q --help=target``)."""
    out = _run([compiler, "-march=native", "-Q", "--help=target"])
    kept = []
    for line in out.split("\n"):
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("-m") and (parts[1] == "[enabled]" or parts[0].endswith("=")):
            kept.append(f"{parts[0]}{'' if parts[1] == '[enabled]' else parts[1]}")
    return " ".join(kept) if kept else out.strip()


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout
    except OSError:
        return "unknown"


def native_flags(flags) -> Optional[str]:
    """The features behind ``-march=native`` where ``flags`` ask for it (a build for "this CPU"), else None."""
    return compiler_facts()["native"] if any(f in NATIVE for f in flags) else None


def nvcc_path() -> Optional[str]:
    """nvcc on PATH, else the default CUDA install; None where there is none."""
    import shutil

    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.exists() else None
