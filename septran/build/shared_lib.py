"""Shared objects built once per content into the cache: a vendor library (kernels go through ``store``).

The file's name holds the hash of what it is built from; a sidecar
``<lib>.sha256``, written after the library, holds the hash of the library
itself. A library that does not match it (truncated, overwritten; loading one
can crash the process with SIGBUS) is rebuilt, with a warning, before it is
loaded. Builds go to a temporary name and are renamed into place, so a
concurrent reader never sees half a file, under an exclusive lock on the
folder, so that a process never takes another's build in progress for damage.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Optional

from septran import env
from septran.errors import BuildError
from septran.build import integrity

log = logging.getLogger(__name__)


def run_compiler(cmd: list[str], what: str) -> None:
    """Runs a compiler; any failure (missing, refused, killed) is a BuildError with the compiler's own message."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as err:
        raise BuildError(f"building {what} failed: {' '.join(cmd)}: {err}",
                         hint="check that the compiler is installed") from err
    if done.returncode:
        raise BuildError(f"building {what} failed (exit status {done.returncode}): {' '.join(cmd)}\n"
                         f"{(done.stderr or done.stdout)[-4000:]}")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def built(kind: str, name: str, digest: str, command: Callable[[str, Optional[str]], list[str]], what: str,
          source: Optional[tuple[str, str]] = None) -> Path:
    """``cache/<kind>/<name>_<digest>.so``, built with ``command(output path, source path)`` if it is missing or
    damaged. ``source``: (suffix, text) of a source file written for the build and removed after it."""
    folder = env.cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{name}_{digest}.so"
    if integrity.problem(lib) is None:
        return lib
    # One builder at a time: between another process's rename of the library and the write of its hash, the
    # library has no recorded hash yet, which read as damage (a warning and a second build) until the lock.
    with _locked(folder):
        why = integrity.problem(lib)
        if why is None:  # built by another process while this one waited
            return lib
        if lib.exists():
            log.warning("cached %s %s %s; rebuilding it", what, lib, why)
        return _build(lib, folder, command, what, source)


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the folder ``path`` for the block (no lock file left in the cache); none where the file
    system refuses one."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (some network ones): build unlocked, as before
            pass
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def _build(lib: Path, folder: Path, command, what: str, source) -> Path:
    """``lib`` built anew under a temporary name, renamed into place, then its hash recorded."""
    integrity.clear(lib)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{lib.name}.", suffix=".so")
    os.close(fd)
    src = None
    if source is not None:
        fd, src = tempfile.mkstemp(dir=folder, prefix=f".{lib.name}.", suffix=source[0])
        with os.fdopen(fd, "w") as f:
            f.write(source[1])
    try:
        run_compiler(command(tmp, src), what)
    except BaseException:
        _remove(tmp)  # the linker may have removed its output already
        raise
    finally:
        if src is not None:
            _remove(src)
    digest_of_lib = integrity.sha256_file(Path(tmp))
    # The library first, then its hash: a reader between the two sees a mismatch and rebuilds, never trusts a
    # half-written file. A process that mapped the old library keeps its inode (replace, never overwrite).
    os.replace(tmp, lib)
    integrity.record(lib, digest_of_lib)
    return lib
