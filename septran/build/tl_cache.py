"""TileLang's kernel cache as SepTran uses it: an entry is trusted only when every file matches its manifest.

TileLang 0.1.15 keeps a compiled kernel in
``$TILELANG_CACHE_DIR/<version>/<os>-<arch>/kernels/<key>/``: ``device_kernel.cu``,
``host_kernel.cu``, ``kernel_lib.so``, ``params.json`` and ``manifest.json``
(each file's size and sha256, written after the others; the entry is staged
and renamed into place, so it appears whole). On load TileLang itself checks
the sizes of all files but the hashes only of ``kernel_lib.so`` and
``params.json``, and heals those. A source file damaged without a change of
size (garbage in ``device_kernel.cu``) is loaded and then fails on every run
(``UnicodeDecodeError`` when the source is read). So after ``tilelang.compile``
returns, SepTran checks every file of the entry it came from against the
manifest; on a mismatch it logs one warning, removes the entry (from disk and
from TileLang's memory), and compiles again.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Callable, Optional

from septran.build import integrity

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def checked(compile_once: Callable):
    """``compile_once()`` (a ``tilelang.compile`` call), again once if the cache entry it used is damaged."""
    kernel = compile_once()
    entry = getattr(kernel, "_tilelang_cache_path", None)
    why = problem(Path(entry)) if entry else None
    if why is None:
        return kernel
    log.warning("TileLang's cached kernel %s %s; removing it and rebuilding", entry, why)
    _evict(getattr(kernel, "_tilelang_cache_key", None), Path(entry))
    return compile_once()


def problem(entry: Path) -> Optional[str]:
    """Why a cache entry cannot be trusted, or None (also when there is none: caching off, or it was not saved)."""
    if not entry.is_dir():
        return None
    try:
        files = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))["files"]
        expected = {str(name): (int(meta["size"]), str(meta["sha256"])) for name, meta in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "has an unreadable manifest"
    for name, (size, digest) in sorted(expected.items()):
        path = entry / name
        try:
            if path.stat().st_size != size:
                return f"has {name} of the wrong size"
        except OSError:
            return f"is missing {name}"
        if integrity.sha256_file(path) != digest:
            return f"has {name} that does not match its recorded hash"
    return None


def _evict(key: Optional[str], entry: Path) -> None:
    shutil.rmtree(entry, ignore_errors=True)
    if key is None:
        return
    try:  # TileLang also keeps the loaded kernel in memory, per execution backend
        from tilelang.cache import _dispatch_map

        for cache in _dispatch_map.values():
            with cache._lock:
                cache._memory_cache.pop(key, None)
    except (ImportError, AttributeError) as err:  # another TileLang: the rebuild may come from its memory
        log.debug("could not evict %s from TileLang's memory cache: %s", key, err)
