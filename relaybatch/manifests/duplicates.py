"""Duplicate detection in flat memory: seen keys live in a temporary SQLite file, not a Python set.

A Python set of one million 32-character keys takes about 100 MB, and even 8-byte digests cost
about 60 MB as Python ints in a set. The finder keeps one 8-byte digest per key (plus where it was
first seen, as integers) in an on-disk table with a bounded page cache, so memory stays the same
for 1,000 rows or 10 million; the cost is disk (about 40 bytes a row).

Keys arrive in batches (`BATCH_ROWS`) inserted with one statement. When every key of a batch is new
(the usual case) that is all; only a batch that hit a repeat is looked at row by row.

Two different keys sharing their first 64 bits would be reported as duplicates; across a million
rows the chance is about 3 in 100 million.

A plan keeps the table (``path``): when rows are appended to a data file later, only the new rows
are validated, and ``earlier`` finds which of their keys the rows planned before already hold. The
table is the finder's own: others get its rows through ``KeptRows`` (the checkpoint records them
as the plan's fingerprint), never by naming its table or columns.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# SQLite page cache in KiB (a negative cache_size means KiB): the memory ceiling of the table.
_CACHE_KIB = 2048
BATCH_ROWS = 10_000


class Where(NamedTuple):
    """A row named by integers: job index, row number within the job, and line (for messages)."""

    job: int
    number: int
    line: int


@dataclass(frozen=True)
class Repeat:
    label: str  # what the caller named the key with (e.g. the item id), for messages
    where: Where
    first: Where


def digest(key: str) -> int:
    """A signed 64-bit integer from the first 16 hex digits of a hex key (SQLite integers are signed)."""
    value = int(key[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


# Digests already seen before this finder started (rows planned earlier), with where each was.
Earlier = Callable[[list[int]], dict[int, Where]]


@dataclass(frozen=True)
class EarlierRows:
    """Lookups of the rows a plan already holds: by request key digest, and by item id digest."""

    keys: Earlier
    ids: Earlier


class DuplicateFinder:
    """Collects (hex key, where) pairs and reports every key that repeats, a batch at a time.

    ``path``: keep the table in that file (created afresh) instead of a temporary one. ``earlier``:
    digests seen before this finder started, looked up a batch at a time; a key found there is a
    repeat of that earlier row."""

    def __init__(self, path: Path | None = None, earlier: Earlier | None = None) -> None:
        self._folder = None if path is not None else tempfile.TemporaryDirectory(prefix="relaybatch-dups-")
        if path is None:
            assert self._folder is not None
            path = Path(self._folder.name) / "seen.sqlite"
        path.unlink(missing_ok=True)
        self._earlier = earlier
        self._db = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", f"cache_size=-{_CACHE_KIB}"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute(
            "CREATE TABLE seen (digest INTEGER PRIMARY KEY, job INTEGER, number INTEGER, line INTEGER)"
        )
        # Digests, not key strings: the pending batch is the finder's only Python-side memory.
        self._pending: list[tuple[int, Where, str]] = []

    @property
    def full(self) -> bool:
        return len(self._pending) >= BATCH_ROWS

    def add(self, key: str, where: Where, label: str = "") -> None:
        self._pending.append((digest(key), where, label))

    def flush(self) -> list[Repeat]:
        """Every repeat among the keys added since the last flush, in the order they were added."""
        pending, self._pending = self._pending, []
        if not pending:
            return []
        found = self._earlier([value for value, _, _ in pending]) if self._earlier else {}
        repeats = [Repeat(label, where, found[value]) for value, where, label in pending if value in found]
        pending = [entry for entry in pending if entry[0] not in found]
        db = self._db
        before = db.total_changes
        db.execute("BEGIN")
        # Sorted by digest, the inserts walk the B-tree in order instead of jumping around it.
        rows = sorted((value, *where) for value, where, _ in pending)
        db.executemany("INSERT OR IGNORE INTO seen VALUES (?, ?, ?, ?)", rows)
        db.execute("COMMIT")
        if db.total_changes - before != len(pending):
            for value, where, label in pending:
                row = db.execute("SELECT job, number, line FROM seen WHERE digest = ?", (value,)).fetchone()
                first = Where(*row)
                if (first.job, first.number) != (where.job, where.number):
                    repeats.append(Repeat(label, where, first))
        return sorted(repeats, key=lambda repeat: repeat.where) if found else repeats

    def close(self) -> None:
        self._db.close()
        if self._folder is not None:
            self._folder.cleanup()

    def __enter__(self) -> DuplicateFinder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class KeptRows:
    """The rows a finder kept in its file (``DuplicateFinder(path)``): (digest, job, line) of every
    key first seen, in digest order. The file's table is this module's own; a reader gets the rows
    by iterating (streamed), or, to copy them into another SQLite database, as the query
    ``select_sql`` gives over the file attached there under a name of the reader's choosing.

    Why the second way: a plan copies two such tables into the checkpoint, and one ``insert ...
    select`` of a million rows costs about 0.4 s of CPU where the same rows streamed through Python
    and ``executemany`` cost about 2.5 s (a throwaway script, 2026-11-26 11:12 UTC, load 9 on 2
    cores): 5 s more before the first request of a million-item run."""

    path: Path

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            yield from db.execute("SELECT digest, job, line FROM seen ORDER BY digest")
        finally:
            db.close()

    def select_sql(self, database: str) -> str:
        """SQL of the rows (digest, job, line) once ``path`` is attached as ``database``."""
        return f"SELECT digest, job, line FROM {database}.seen"
