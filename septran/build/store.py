"""One build's stage outputs on disk: ``<cache>/<builder>/<name>_<key>.<ext>``, each with a sidecar bound to its key.

The sidecar ``<file>.json`` records the key the entry was built under (all 64
hex digits; the name holds the first 16), the sha256 of the entry's bytes and
what the stage adds (the C calling convention of a library). An entry is
trusted only if it is a plain file, its sidecar parses, names this key and
this hash: a pair of entries swapped with their sidecars, an entry renamed,
truncated or overwritten, a directory or a foreign file where the entry
should be, is rebuilt with one warning, never used. Nothing in a key or a
sidecar is an absolute path, so a cache folder moved elsewhere still hits.
Every file is written whole (a temporary sibling, then a rename), the sidecar
before its entry: a reader between the two finds the entry missing (and builds
it too, to the same content) or, where a damaged entry is being replaced, a
mismatch; never half a file, and no warning for an entry another process is
creating at the same moment.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Optional

from septran import env
from septran.build import integrity

log = logging.getLogger(__name__)

SIDECAR = ".json"


class Entries:
    """The stage outputs of one build: one folder per builder, one file per stage."""

    def __init__(self, builder: str, name: str, key: str):
        self.folder = env.cache_dir() / builder
        self.name = name
        self.key = key

    def path(self, ext: str) -> Path:
        return self.folder / f"{self.name}_{self.key[:16]}.{ext}"

    def read(self, ext: str, what: str) -> Optional[tuple[bytes, dict]]:
        """The entry's bytes and its sidecar's record, or None when it is missing or cannot be trusted (warned)."""
        path = self.path(ext)
        data, meta, why = _check(path, self.key)
        if why is None:
            return data, meta
        if why != "missing":
            log.warning("cached %s %s %s; rebuilding it", what, path, why)
        return None

    def check(self, ext: str, what: str) -> Optional[dict]:
        """The sidecar's record when the entry can be trusted (read() without keeping the bytes)."""
        found = self.read(ext, what)
        return None if found is None else found[1]

    def write(self, ext: str, data: bytes, **meta) -> Path:
        """Stores ``data`` as the entry (its sidecar first); returns the entry's path."""
        path = self.path(ext)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._record(path, integrity.sha256_bytes(data), meta)
        integrity.write_atomic(path, data)
        return path

    def adopt(self, ext: str, built: Path, **meta) -> Path:
        """Moves a file built beside the entry (``temporary()``) into place, its sidecar first."""
        path = self.path(ext)
        self._record(path, integrity.sha256_file(built), meta)
        integrity.clear(path)
        os.replace(built, path)  # a process that mapped the old library keeps its inode: replace, never overwrite
        return path

    def temporary(self, ext: str) -> Path:
        """A fresh file name beside the entry, for a compiler to write into."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{self.path(ext).name}.", suffix=f".{ext}")
        os.close(fd)
        return Path(tmp)

    def _record(self, path: Path, digest: str, meta: dict) -> None:
        record = {"key": self.key, "sha256": digest, **meta}
        integrity.write_atomic(sidecar(path), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR)


def problem(path: Path, key: Optional[str] = None) -> Optional[str]:
    """Why the entry at ``path`` cannot be trusted (under ``key``, or under the key its sidecar names), or None."""
    if key is None:
        try:
            key = json.loads(sidecar(path).read_text())["key"]
        except (OSError, ValueError, KeyError, TypeError):
            key = ""
    return _check(path, key)[2]


def _check(path: Path, key: str) -> tuple[Optional[bytes], dict, Optional[str]]:
    if not os.path.lexists(path):
        return None, {}, "missing"
    if path.is_symlink() or not path.is_file():
        return None, {}, "is not a plain file (a directory or a link stands where the entry should be)"
    try:
        record = json.loads(sidecar(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, {}, "has no sidecar (a file SepTran did not write, or one whose writing was cut short)"
    except (OSError, ValueError, UnicodeDecodeError) as err:
        return None, {}, f"has an unreadable sidecar ({type(err).__name__})"
    if not isinstance(record, dict) or not isinstance(record.get("key"), str) or not isinstance(record.get("sha256"), str):
        return None, {}, "has a sidecar SepTran did not write"
    if record["key"] != key:
        return None, {}, "was built under another key (entries swapped or renamed)"
    try:
        data = path.read_bytes()
    except OSError as err:
        return None, {}, f"cannot be read ({err.strerror})"
    if integrity.sha256_bytes(data) != record["sha256"]:
        return None, {}, "does not match the sha256 its sidecar records (truncated or overwritten)"
    return data, record, None
