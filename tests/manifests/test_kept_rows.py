"""A duplicate finder's kept rows are handed over through ``KeptRows``, not by naming its table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaybatch.manifests.duplicates import DuplicateFinder, KeptRows, Where, digest


def test_kept_rows_stream_and_copy_the_same_rows(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite"
    with DuplicateFinder(path) as finder:
        finder.add("b" * 32, Where(0, 1, 7))
        finder.add("a" * 32, Where(1, 2, 9))
        assert finder.flush() == []
    rows = KeptRows(path)
    expected = sorted([(digest("b" * 32), 0, 7), (digest("a" * 32), 1, 9)])
    assert list(rows) == expected
    other = sqlite3.connect(tmp_path / "other.sqlite")
    other.execute("attach database ? as kept", [str(path)])
    assert sorted(other.execute(rows.select_sql("kept")).fetchall()) == expected
    other.close()
