"""The tuning database: an append-only file of JSON lines, one trial per line, safe for concurrent writers.

Writing: each record is one ``os.write`` of its whole line to a file opened
with ``O_APPEND``, under an exclusive ``flock``, so processes and Ray
workers on one machine append whole lines and never interleave. A writer
that died mid-line leaves a line without its newline; the next writer starts
on a fresh line, so the damage stays one unreadable line.

Reading: under a shared ``flock``, only the bytes appended since the last
read (the file only grows). A line that is not a record of this schema
(garbage, a truncated last line, a future schema) is skipped, with one
logged warning per read; reading never raises for a line's content.

Records are never rewritten or deleted; ``septran db export`` writes a copy
elsewhere. A database that cannot be written (a full disk, ``/dev/full``, a
read-only file or folder) does not stop a search: the records are kept in
this process's memory, read back like the file's, with one warning per file.
Each record read from the file keeps its line number (``where``), so that a
caller can name the line of a record it will not use.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

from septran import env
from septran.paths import check_user_path
from septran.records.key import TuningKey
from septran.records.record import STATUSES, Timing, TuningRecord, point_id
from septran.records.shown import shown

log = logging.getLogger(__name__)

__all__ = ["TuningDB", "TuningKey", "TuningRecord", "Timing", "STATUSES", "point_id", "default_db", "best_of"]


# The start of every line ``TuningRecord.to_line`` writes: the key's digest comes second, so a line is indexed by
# it without being parsed (a record is about 7 KB of JSON with its timings: parsing and checking it took 0.4 ms,
# and a warm process with a few hundred records spent more on its database than on its kernel).
_KEYED_LINE = re.compile(rb'\{"schema":1,"key":"([0-9a-f]{64})",')


@dataclass
class _Index:
    """What has been read so far: the records by key digest and by key-without-space digest; lines whose key a
    lookup has not asked for yet wait unparsed in ``pending``."""

    file: tuple[int, int] = (0, 0)  # (st_dev, st_ino): a replaced file is read again from the start
    offset: int = 0  # bytes read, up to the end of the last whole line
    records: list[TuningRecord] = field(default_factory=list)  # parsed so far (file order: ``in_order``)
    by_key: dict[str, list[TuningRecord]] = field(default_factory=dict)
    by_work: dict[str, list[TuningRecord]] = field(default_factory=dict)
    pending: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)  # written key -> (line, text)
    warned_tail: tuple[int, int] = (-1, -1)
    lines: int = 0  # whole lines read so far
    line_of: dict[int, int] = field(default_factory=dict)  # id(record) -> its line in the file (records are kept)

    def add(self, record: TuningRecord, line: Optional[int] = None) -> None:
        if line is not None:
            self.line_of[id(record)] = line
        self.records.append(record)
        self.by_key.setdefault(record.key.digest(), []).append(record)
        self.by_work.setdefault(record.key.point_digest(), []).append(record)

    def parse(self, digests: Iterable[str]) -> int:
        """Parses the pending lines written under these key digests; returns how many were not records. A line
        whose written digest is not its key's is indexed under its key's (it never matches the lookup)."""
        skipped, added = 0, []
        for digest in list(digests):
            for n, line in sorted(self.pending.pop(digest, ())):
                record = _record_of(line)
                if record is None:
                    skipped += 1
                else:
                    self.add(record, n)
                    added.append(record)
        order = lambda r: self.line_of.get(id(r), 0)  # noqa: E731 - the lists stay in file order
        for digest in {r.key.digest() for r in added}:
            self.by_key[digest].sort(key=order)
        for digest in {r.key.point_digest() for r in added}:
            self.by_work[digest].sort(key=order)
        return skipped

    def in_order(self) -> list[TuningRecord]:
        return sorted(self.records, key=lambda r: self.line_of.get(id(r), 0))


class TuningDB:
    """The records at ``path`` (default: ``SEPTRAN_TUNING_DB``, else ``tuning.jsonl`` in the cache folder)."""

    def __init__(self, path: Union[str, os.PathLike, None] = None):
        self.path = Path(check_user_path(path, "the tuning database", env.SettingError)) if path is not None else env.tuning_db()
        self._index = _Index()
        self._lock = threading.Lock()
        self._unwritten = _UNWRITTEN.setdefault(str(self.path), [])  # shared by every TuningDB of this path

    def __repr__(self) -> str:
        return f"TuningDB({str(self.path)!r})"

    # -- writing ---------------------------------------------------------------------------------------------

    def append(self, record: TuningRecord) -> None:
        """Add one record as one line, atomically with respect to other writers on this machine."""
        self.extend([record])

    def extend(self, records: Iterable[TuningRecord]) -> None:
        """Add records, one whole-line write each, under one lock."""
        records = list(records)
        lines = [r.to_line() for r in records]
        if not lines:
            return
        try:
            self._write(lines)
        except OSError as e:
            self._keep_in_memory(records, e)

    def _write(self, lines: list[bytes]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                log.warning("%s ends in a partial line (a writer was interrupted); starting a new line", self.path)
                lines[0] = b"\n" + lines[0]
            for line in lines:
                _write_all(fd, line)
        finally:
            os.close(fd)  # closing releases the lock

    def _keep_in_memory(self, records: list[TuningRecord], err: OSError) -> None:
        """A database that cannot be written: the records stay in this process (a search's answer is not lost
        after its measurements), with one warning per file. A record half written before the error is one
        unfinished line, which readers skip."""
        with self._lock:
            first = not self._unwritten
            self._unwritten.extend(records)
        if first:
            log.warning("cannot write the tuning database %s (%s): its new records are kept in this process's memory "
                        "only, and the tuned points are lost when it ends; set SEPTRAN_TUNING_DB to a file SepTran may "
                        "append to", shown_path(self.path), err.strerror or err)

    def where(self, record: TuningRecord) -> str:
        """``file:line`` of a record read from the database (the file alone for a record kept in memory)."""
        line = self._index.line_of.get(id(record))
        return f"{shown_path(self.path)}:{line}" if line is not None else f"{shown_path(self.path)} (kept in memory)"

    # -- reading ---------------------------------------------------------------------------------------------

    def all(self) -> list[TuningRecord]:
        """Every readable record, in the order written (then those kept in memory)."""
        return self._parsed(None).in_order() + list(self._unwritten)

    def records(self, key: TuningKey) -> list[TuningRecord]:
        """Every record of exactly this key (all fields, the space hash included), in the order written."""
        digest = key.digest()
        return list(self._parsed([digest]).by_key.get(digest, ())) + [r for r in self._unwritten if r.key.digest() == digest]

    def records_by_point(self, key: TuningKey) -> dict[str, list[TuningRecord]]:
        """The records of this key's work in ANY search space, by point id (``record.point`` names the values).

        Every field but the space hash must match: a search over an extended
        space finds here the points it has already measured.
        """
        out: dict[str, list[TuningRecord]] = {}
        digest = key.point_digest()
        kept = [r for r in self._unwritten if r.key.point_digest() == digest]
        for record in list(self._parsed(None).by_work.get(digest, ())) + kept:
            out.setdefault(record.point_id, []).append(record)
        return out

    def empty(self) -> bool:
        """No readable record: a caller need not compute a key (a logic hash, a device identity) to look one up."""
        index = self._refresh()
        return not index.records and not index.pending and not self._unwritten

    def best(self, key: TuningKey) -> Optional[TuningRecord]:
        """The ok record of this key with the lowest median (ties: the earliest), or None.

        A point that was ever recorded ``wrong`` under this key is never
        the best, whatever its other trials say.
        """
        return best_of(self.records(key))

    def _refresh(self) -> _Index:
        """Reads what was appended since the last read; returns the index (shared: callers copy)."""
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                self._index = _Index()
                return self._index
            except OSError as e:
                raise env.SettingError(f"cannot read the tuning database {str(self.path)!r}: {e.strerror}",
                                       hint="set SEPTRAN_TUNING_DB to a file SepTran may read and append to") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                stat = os.fstat(fd)
                index = self._index
                if (stat.st_dev, stat.st_ino) != index.file or stat.st_size < index.offset:
                    index = self._index = _Index(file=(stat.st_dev, stat.st_ino))
                data = _read_from(fd, index.offset, stat.st_size)
            except IsADirectoryError:
                raise env.SettingError(f"the tuning database {str(self.path)!r} is a folder, not a file",
                                       hint="set SEPTRAN_TUNING_DB to a file path") from None
            finally:
                os.close(fd)
            self._parse(index, data)
            return index

    def _parsed(self, digests: Optional[list[str]]) -> _Index:
        """The index with the pending lines of these key digests parsed (None: every one)."""
        index = self._refresh()
        with self._lock:
            skipped = index.parse(list(index.pending) if digests is None else [d for d in digests if d in index.pending])
        if skipped:
            log.warning("%s: skipped %d line(s) that are not tuning records", self.path, skipped)
        return index

    def _parse(self, index: _Index, data: bytes) -> None:
        end = data.rfind(b"\n") + 1
        skipped = 0
        for n, line in enumerate(data[:end].split(b"\n")[:-1], index.lines + 1):
            keyed = _KEYED_LINE.match(line)
            if keyed is not None:  # parsed when its key is asked for
                index.pending.setdefault(keyed.group(1).decode("ascii"), []).append((n, line))
            elif line.strip():
                record = _record_of(line)
                if record is None:
                    skipped += 1
                else:
                    index.add(record, n)
        index.lines += data.count(b"\n", 0, end)
        index.offset += end
        tail = data[end:]
        unfinished = bool(tail.strip()) and index.warned_tail != (index.offset, len(tail))
        if unfinished:
            index.warned_tail = (index.offset, len(tail))
        if skipped or unfinished:
            log.warning("%s: skipped %d line(s) that are not tuning records%s", self.path, skipped + unfinished,
                        " (the last line is unfinished)" if unfinished else "")


def best_of(records: Iterable[TuningRecord]) -> Optional[TuningRecord]:
    """The ok record with the lowest median (ties: the first), skipping every point that has a ``wrong`` record.

    Interleaved re-measurements (the search's final round between its best few) decide where there are any:
    they were taken side by side, so their medians compare; the search's first pass only picks the finalists.
    """
    records = list(records)
    wrong = {r.point_id for r in records if r.status == "wrong"}
    ok = [r for r in records if r.status == "ok" and r.point_id not in wrong]
    final = [r for r in ok if r.timing is not None and r.timing.interleaved]
    if final:  # the latest final round (its records share features["final_round"])
        latest = max(final, key=lambda r: r.created)
        ok = [r for r in final if r.features.get("final_round") == latest.features.get("final_round")]
    return min(ok, key=lambda r: r.median_s, default=None)  # min keeps the first of equals


# Records a TuningDB could not write, by database path: kept for this process, read back with the file's.
_UNWRITTEN: dict[str, list[TuningRecord]] = {}


def shown_path(path) -> str:
    """A database path as a message may print it (a path may hold any character but NUL)."""
    return shown(str(path))


# The last reader of each database file, with the file's identity when it was handed out: a kernel's point is
# chosen at its first call, and parsing the whole file again for each kernel cost a model's warm compile a
# second with a few dozen records (their validation).
_READERS: dict[str, tuple[tuple, TuningDB]] = {}


def default_db() -> TuningDB:
    """The database ``SEPTRAN_TUNING_DB`` names (the variable is read at each call). While the file is unchanged
    (device, inode, size, modification time), the same reader, which has parsed it already, is handed out;
    any change to the file gives a fresh reader."""
    db = TuningDB()
    try:
        st = os.stat(db.path)
    except OSError:
        return db
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    held = _READERS.get(str(db.path))
    if held is not None and held[0] == stamp:
        return held[1]
    _READERS[str(db.path)] = (stamp, db)
    return db


def _record_of(line: bytes) -> Optional[TuningRecord]:
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            return None
        return TuningRecord.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None


def _read_from(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 24), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    """One ``os.write`` of the whole line; a short write (a full disk) is finished while the lock is held."""
    while data:
        written = os.write(fd, data)
        data = data[written:]
