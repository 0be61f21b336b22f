"""The ledger's SQLite store: a group of charges written in one transaction reads back exactly as
the same charges written one by one (types, decimals, NULLs), and a failed group writes nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cost_builders import fill_cost_store, sample_rows, unknown_video_row

from relaybatch.costs import CostStore, write_ledger
from relaybatch.costs.ledger import budget_amount, unknown_amount


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
            "create trigger refuse before insert on charge_rows when new.item_key = 'key007' "
            "begin select raise(abort, 'refused'); end"
        )
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            store.record_many(sample_rows())
        assert list(store.records()) == []
    finally:
        store.close()


def test_a_rewrite_writes_the_ledger_again_whatever_its_mark(tmp_path: Path) -> None:
    fill_cost_store(tmp_path)
    store = CostStore(tmp_path / "costs.sqlite")
    ledger = tmp_path / "ledger.parquet"
    try:
        write_ledger(store, ledger)
        inode = ledger.stat().st_ino
        # `relaybatch export`: the file may have been edited in place, footer kept; it says so itself.
        write_ledger(store, ledger, rewrite=True)
        assert ledger.stat().st_ino != inode and pq.read_table(ledger).num_rows == 20
        inode = ledger.stat().st_ino
        write_ledger(store, ledger)  # no rewrite asked: the mark is trusted again
        assert ledger.stat().st_ino == inode
    finally:
        store.close()


def test_the_ledger_of_an_unchanged_cost_store_is_not_written_again(tmp_path: Path) -> None:
    fill_cost_store(tmp_path)
    store = CostStore(tmp_path / "costs.sqlite")
    ledger = tmp_path / "ledger.parquet"
    write_ledger(store, ledger)
    inode = ledger.stat().st_ino  # a rewrite (temporary name, then rename) gives a new inode

    write_ledger(store, ledger)
    assert ledger.stat().st_ino == inode

    store.record(unknown_video_row("clips", "v1", "k1"))
    write_ledger(store, ledger)
    assert ledger.stat().st_ino != inode and pq.read_table(ledger).num_rows == 21
    inode = ledger.stat().st_ino
    assert store.resolve("k1:create", None)  # settled in place: no new row, still a change
    write_ledger(store, ledger)
    assert ledger.stat().st_ino != inode
    assert "not charged" in pq.read_table(ledger).column("outcome").to_pylist()
    store.close()


def _summed(store: CostStore) -> tuple[Decimal, Decimal, dict[str, Decimal]]:
    """The budget's sums computed row by row from the records, the way they are defined."""
    records = list(store.records())
    per_job: dict[str, Decimal] = {}
    for record in records:
        per_job[record["job"]] = per_job.get(record["job"], Decimal(0)) + budget_amount(record)
    total = sum((budget_amount(record) for record in records), Decimal(0))
    return total, sum((unknown_amount(record) for record in records), Decimal(0)), per_job


def test_spend_sums_are_kept_between_writes_and_made_again_after_each(tmp_path: Path) -> None:
    fill_cost_store(tmp_path)
    store = CostStore(tmp_path / "costs.sqlite")
    try:
        total, unknown, per_job = _summed(store)
        assert store.spent() == (total, per_job) and store.unknown_spent() == unknown
        # Kept: a change that bypasses the store's writes (never done outside a test) goes unseen.
        store.db.execute("delete from charge_rows")
        assert store.spent() == (total, per_job)

        for change in (  # each write through the store makes them again, from the rows as they are
            lambda: store.record(unknown_video_row("clips", "v1", "k1")),
            lambda: store.resolve("k1:create", Decimal("0.25")),
        ):
            change()
            total, unknown, per_job = _summed(store)
            assert store.spent() == (total, per_job) and store.unknown_spent() == unknown
        assert per_job == {"clips": Decimal("0.25")}
    finally:
        store.close()


def test_a_ledger_written_in_small_batches_equals_the_rows_converted_at_once(tmp_path: Path) -> None:
    """Columns empty in one batch (a chat row has no video price) are shared all-null arrays: the
    file still has every column's type and the same values as the rows converted in one go."""
    from relaybatch.costs.ledger import ledger_schema, ledger_table

    fill_cost_store(tmp_path)
    store = CostStore(tmp_path / "costs.sqlite")
    try:
        names = ", ".join(column.name for column in ledger_schema())
        rows = store.db.conn.execute(f"select {names} from charges order by charged_at, id").fetchall()
        whole = ledger_table(rows)
        empty_somewhere = [
            name
            for name in whole.column_names
            if any(
                ledger_table(rows[i : i + 3]).column(name).null_count == len(rows[i : i + 3])
                for i in range(0, 20, 3)
            )
            and whole.column(name).null_count < len(rows)
        ]
        assert empty_somewhere, "the sample rows should leave some column empty in some batch"
        # and two batches' empty columns are one array: no memory per row group
        first, second = ledger_table(rows[:3]), ledger_table(rows[3:6])
        shared = [name for name in first.column_names if first.column(name).null_count == 3]
        assert shared and all(
            first.column(name).chunk(0).buffers()[-1].address
            == second.column(name).chunk(0).buffers()[-1].address
            for name in shared
            if second.column(name).null_count == 3
        )
        write_ledger(store, tmp_path / "ledger.parquet", batch_rows=3)
    finally:
        store.close()
    written = pq.read_table(tmp_path / "ledger.parquet")
    assert written.schema.equals(ledger_schema(), check_metadata=False)
    assert written.num_rows == len(rows) == 20
    assert written.cast(whole.schema).equals(whole)
