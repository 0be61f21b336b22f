"""The ledger's SQLite store: a group of charges written in one transaction reads back exactly as
the same charges written one by one (types, decimals, NULLs), and a failed group writes nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from cost_builders import sample_rows

from relaybatch.costs import CostStore


def _records(path: Path) -> list[tuple[tuple[str, object, str], ...]]:
    store = CostStore(path)
    try:
        rows = list(store.records())
        return [tuple((name, value, type(value).__name__) for name, value in row.items()) for row in rows]
    finally:
        store.close()


def test_a_group_reads_back_as_the_same_rows_written_one_by_one(tmp_path: Path) -> None:
    rows = sample_rows()
    rows[3] = dataclasses.replace(rows[3], item_id='odd " quote \\ é \u0000 nul')
    one_by_one, grouped = CostStore(tmp_path / "one.sqlite"), CostStore(tmp_path / "group.sqlite")
    try:
        for row in rows:
            one_by_one.record(row)
        grouped.record_many(rows[:10])  # holds the NUL: bound row by row
        grouped.record_many(rows[10:])  # a group in one transaction
    finally:
        one_by_one.close()
        grouped.close()

    expected = _records(tmp_path / "one.sqlite")
    assert len(expected) == 20
    assert _records(tmp_path / "group.sqlite") == expected


def test_a_group_that_fails_writes_nothing(tmp_path: Path) -> None:
    store = CostStore(tmp_path / "costs.sqlite")
    try:
        store.db.execute(
            "create trigger refuse before insert on charges when new.item_key = 'key007' "
            "begin select raise(abort, 'refused'); end"
        )
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            store.record_many(sample_rows())
        assert list(store.records()) == []
    finally:
        store.close()
