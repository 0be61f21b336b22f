"""The cost store opened read-only (``CostStore.open_read_only``): what `relaybatch status` reads
beside a running execution. It never creates, migrates or writes the store; an older layout is
read as it is; no store means nothing spent yet."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from cost_builders import sample_rows, unknown_video_row
from test_costs_store_layout import layout0_store, old_rows, raw, reservation, typed

from relaybatch.costs import CostStore
from relaybatch.costs.ledger import SCHEMA_VERSION, budget_amount
from relaybatch.costs.report import JOB_COLUMNS, REPORT_COLUMNS, run_spend_figures


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of ``folder`` with its bytes and modification time (nanoseconds)."""
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(folder.iterdir())}


def store_files(folder: Path) -> dict[str, tuple[bytes, int]]:
    """The cost store's own file as ``snapshot`` gives it (SQLite's side files left out: a WAL
    reader may create them empty when no writer has them open)."""
    return {name: found for name, found in snapshot(folder).items() if name == "costs.sqlite"}


def filled(folder: Path) -> Path:
    """A closed store with charges, an unknown outcome and a call in flight."""
    path = folder / "costs.sqlite"
    store = CostStore(path)
    try:
        store.record_many([*sample_rows(), reservation(sample_rows()[0], "attempt-9")])
        store.record(unknown_video_row("videos", "v1", "key-unknown"))
    finally:
        store.close()
    return path


def test_no_store_is_nothing_spent_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "run" / "costs.sqlite"
    assert CostStore.open_read_only(missing) is None
    assert not (tmp_path / "run").exists()  # not even the folder

    spend = run_spend_figures(tmp_path / "run", export=False)
    assert (spend.calls, spend.total_usd) == (0, Decimal(0))
    assert not (tmp_path / "run").exists()


def test_reading_changes_no_byte_and_no_time_of_the_store(tmp_path: Path) -> None:
    path = filled(tmp_path)
    expected = {row["id"]: row for row in old_rows(path)}  # every row, as a plain connection reads it
    before = store_files(tmp_path)

    store = CostStore.open_read_only(path)
    assert store is not None
    try:
        assert {record["id"]: record for record in store.records()} == expected
        spent, by_job = store.spent()  # the budget's sums: made afresh, not saved beside the count
        assert spent == sum((budget_amount(row) for row in expected.values()), Decimal(0))
        assert by_job["videos"] == Decimal("0.40")
        assert len(store.unknown_outcomes()) == 2  # the unknown outcome and the call in flight
        assert len(list(store.charges_since(REPORT_COLUMNS))) == len(expected)
    finally:
        store.close()

    assert store_files(tmp_path) == before
    wal = tmp_path / "costs.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # a reader writes no frame
    assert raw(path, "select totals from changes") == [(None,)]  # the sums were not saved


def test_a_read_only_store_refuses_every_write(tmp_path: Path) -> None:
    path = filled(tmp_path)
    before = store_files(tmp_path)
    store = CostStore.open_read_only(path)
    assert store is not None
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.record(sample_rows()[3])
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.reservations_to_unknown()
    finally:
        store.close()
    assert store_files(tmp_path) == before


def test_an_old_layout_is_read_as_it_is_never_migrated(tmp_path: Path) -> None:
    path = layout0_store(tmp_path)
    rows = old_rows(path)
    before = store_files(tmp_path)

    store = CostStore.open_read_only(path)
    assert store is not None
    try:
        as_they_are = [{name: value for name, value in row.items() if name != "execution"} for row in rows]
        assert [typed(record) for record in store.records()] == [typed(row) for row in as_they_are]
        spent, by_job = store.spent()  # layout 0 had no ``changes`` table: summed, nothing saved
        assert spent == sum((budget_amount(row) for row in rows), Decimal(0))
        assert by_job["videos"] == Decimal("0.40")
    finally:
        store.close()
    spend = run_spend_figures(tmp_path, export=False)
    assert (spend.calls, spend.unknown_outcomes, spend.in_flight) == (4, 2, 1)

    assert store_files(tmp_path) == before
    assert raw(path, "pragma user_version") == [(0,)]
    assert raw(path, "select type from sqlite_schema where name = 'charges'") == [("table",)]
    assert not (tmp_path / "ledger.parquet").exists()  # export=False: nothing written beside it


def test_a_newer_layout_is_refused_with_its_number(tmp_path: Path) -> None:
    path = filled(tmp_path)
    with sqlite3.connect(path) as connection:
        connection.execute(f"pragma user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(sqlite3.DatabaseError, match=f"layout {SCHEMA_VERSION + 1} is newer"):
        CostStore.open_read_only(path)


def test_a_store_whose_tables_are_not_made_yet_is_nothing_spent_yet(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("pragma journal_mode=wal")
    connection.execute("create table prices (model text)")  # a writer half-way through creating it
    connection.close()
    assert CostStore.open_read_only(path) is None


def test_it_reads_what_a_writer_committed_while_the_writer_holds_the_store_open(tmp_path: Path) -> None:
    """WAL: the reader sees every committed charge, never a transaction still open, and neither
    waits for the writer nor makes it wait."""
    path = tmp_path / "costs.sqlite"
    writer = CostStore(path)
    try:
        writer.record(sample_rows()[0])
        writer.db.conn.execute("begin immediate")  # the writer mid-transaction: holds the write lock
        writer.db.conn.execute("update changes set count = count + 1")
        writer.db.conn.execute("delete from charge_rows")

        store = CostStore.open_read_only(path)
        assert store is not None
        try:
            assert [record["id"] for record in store.records()] == ["key000:create"]
        finally:
            store.close()

        writer.db.conn.execute("rollback")
        writer.record(sample_rows()[1])  # the writer goes on after a reader came and went
        assert len(list(writer.records())) == 2
    finally:
        writer.close()


def test_reading_only_the_job_columns_gives_the_reports_figures(tmp_path: Path) -> None:
    """`relaybatch status` reads fewer columns than `relaybatch report`: the same money per job."""
    filled(tmp_path)
    full = run_spend_figures(tmp_path, export=False)
    narrow = run_spend_figures(tmp_path, export=False, columns=JOB_COLUMNS)

    assert narrow.by("job") == full.by("job")
    figures = (
        "known_usd",
        "unknown_usd",
        "in_flight",
        "in_flight_usd",
        "outcome_unknown_usd",
        "unknown_outcomes",
    )
    assert [getattr(narrow, name) for name in figures] == [getattr(full, name) for name in figures]
    assert (full.in_flight, full.in_flight_usd, full.outcome_unknown_usd) == (
        1,
        Decimal("0.25"),
        Decimal("0.40"),
    )
    assert narrow.per_minute == {} and full.per_minute  # no time read, no spend over time
