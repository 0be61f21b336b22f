"""Duplicate detection in flat memory: seen keys live in a temporary SQLite file, not a Python set.

A Python set of one million 32-character keys takes about 100 MB, and even 8-byte digests cost
about 70 MB as Python objects. The finder keeps an 8-byte digest per key in an on-disk table with
a bounded page cache, so memory stays the same for 1,000 rows or 10 million; the cost is disk
(about 30 bytes a row) and roughly a microsecond or two per insert.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

# SQLite page cache for the table, in KiB (negative cache_size means KiB): the memory ceiling.
_CACHE_KIB = 8192


def digest(text: str) -> int:
    """A signed 64-bit integer from the first 16 hex digits of a key (SQLite integers are signed)."""
    value = int(text[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


class DuplicateFinder:
    """Remembers what it has seen under a namespace; `first_seen` answers where a repeat first appeared."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="relaybatch-dups-")
        self._db = sqlite3.connect(Path(self._folder.name) / "seen.sqlite")
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        self._db.execute(
            "CREATE TABLE seen (space INTEGER, digest INTEGER, source TEXT, PRIMARY KEY (space, digest))"
            " WITHOUT ROWID"
        )

    def first_seen(self, space: int, key: str, source: str) -> str | None:
        """None the first time (space, key) is seen, else the source recorded then."""
        value = digest(key)
        cursor = self._db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?, ?)", (space, value, source))
        if cursor.rowcount == 1:
            return None
        found = self._db.execute(
            "SELECT source FROM seen WHERE space = ? AND digest = ?", (space, value)
        ).fetchone()
        return str(found[0])

    def close(self) -> None:
        self._db.close()
        self._folder.cleanup()

    def __enter__(self) -> DuplicateFinder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
