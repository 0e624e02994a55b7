"""Shared objects built once per content into the cache: a kernel built from C, a vendor library.

The file's name holds the hash of what it is built from; a sidecar
``<lib>.sha256``, written after the library, holds the hash of the library
itself. A library that does not match it (truncated, overwritten; loading one
can crash the process with SIGBUS) is rebuilt, with a warning, before it is
loaded. Builds go to a temporary name and are renamed into place, so a
concurrent reader never sees half a file.
"""
from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Optional

from septran import env
from septran.errors import BuildError
from septran.runtime import integrity

log = logging.getLogger(__name__)


def built(kind: str, name: str, digest: str, command: Callable[[str, Optional[str]], list[str]], what: str,
          source: Optional[tuple[str, str]] = None) -> Path:
    """``cache/<kind>/<name>_<digest>.so``, built with ``command(output path, source path)`` if it is missing or
    damaged. ``source``: (suffix, text) of a source file written for the build and removed after it."""
    folder = env.cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{name}_{digest}.so"
    why = integrity.problem(lib)
    if why is None:
        return lib
    if lib.exists():
        log.warning("cached %s %s %s; rebuilding it", what, lib, why)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{lib.name}.", suffix=".so")
    os.close(fd)
    src = None
    if source is not None:
        fd, src = tempfile.mkstemp(dir=folder, prefix=f".{lib.name}.", suffix=source[0])
        with os.fdopen(fd, "w") as f:
            f.write(source[1])
    cmd = command(tmp, src)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as err:
        os.unlink(tmp)
        raise BuildError(f"building {what} failed: {' '.join(cmd)}: {err}",
                         hint="check that the compiler is installed") from err
    finally:
        if src is not None:
            os.unlink(src)
    if done.returncode:
        os.unlink(tmp)
        raise BuildError(f"building {what} failed: {' '.join(cmd)}\n{done.stderr[-4000:]}")
    digest_of_lib = integrity.sha256_file(Path(tmp))
    # The library first, then its hash: a reader between the two sees a mismatch and rebuilds, never trusts a
    # half-written file. A process that mapped the old library keeps its inode (replace, never overwrite).
    os.replace(tmp, lib)
    integrity.record(lib, digest_of_lib)
    return lib
