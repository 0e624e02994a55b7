"""Cached files that prove themselves: atomic writes, and a sha256 to check a file against before it is used.

Every artifact SepTran keeps on disk is written whole or not at all (a
temporary sibling, then ``os.replace``), so concurrent processes never read
half a file. What is on disk can still be damaged afterwards (a full disk, a
crash of the file system, a user's editor); a file is therefore checked
against the hash it was stored under before it is trusted, and rebuilt when it
does not match. The hash lives in the file's name (content-addressed) or in a
sidecar ``<file>.sha256`` written after the file.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

SIDECAR = ".sha256"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> Optional[str]:
    """The file's sha256 in hex, or None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that a reader sees the old file or the whole new one, never a part."""
    clear(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR)


def record(path: Path, digest: str) -> None:
    """Stores ``digest`` as the hash ``path`` must have (after ``path`` itself is in place)."""
    write_atomic(sidecar(path), (digest + "\n").encode())


def recorded(path: Path) -> Optional[str]:
    try:
        text = sidecar(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else None


def clear(path: Path) -> None:
    """Removes a directory (or anything but a plain file) where a file is to be written."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() and not path.is_file():
        path.unlink()


def problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot be trusted against its sidecar (missing, unreadable, no hash, another hash), or None."""
    if not path.exists():
        return "is missing"
    if not path.is_file():
        return "is not a file"
    want = recorded(path)
    if want is None:
        return "has no recorded hash"
    have = sha256_file(path)
    if have is None:
        return "cannot be read"
    return None if have == want else "does not match the hash it was stored under"
