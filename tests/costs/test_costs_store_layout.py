"""The cost store's compact layout shows exactly the rows the wide one held, and stores written
before it (layout 0, ``fixtures/costs_layout0.sql``: the DDL and rows as the earlier relaybatch
wrote them) are migrated on open with every reader seeing the same rows."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from cost_builders import START, sample_rows, unknown_video_row

from relaybatch.cost_model import CallCost, UsageCounts
from relaybatch.costs import CostStore
from relaybatch.costs.ledger import (
    RESERVED,
    SCHEMA_VERSION,
    UNKNOWN,
    LedgerRow,
    flat_record,
    write_ledger,
)

FIXTURE = Path(__file__).parent / "fixtures" / "costs_layout0.sql"


def typed(record: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Each column's name, value and type, as SQLite gives them back (a bool is an integer there)."""
    return [
        (name, int(value), "int") if isinstance(value, bool) else (name, value, type(value).__name__)
        for name, value in record.items()
    ]


def reservation(row: LedgerRow, call: str = "attempt-1") -> LedgerRow:
    return dataclasses.replace(
        row,
        usage=UsageCounts(),
        cost=CallCost((), "base", ("in flight",)),
        outcome=RESERVED,
        reserved_usd=Decimal("0.25"),
        latency_seconds=None,
        call=call,
    )


def raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def test_every_row_reads_back_as_the_wide_row_it_was(tmp_path: Path) -> None:
    """The view ``charges`` gives each row exactly as ``flat_record`` made it: the same columns in
    the same order, the same values and types (money as text, counts as integers)."""
    rows = sample_rows()
    rows[1] = dataclasses.replace(rows[1], call="attempt-12", remote_id="task-1")
    rows[2] = dataclasses.replace(rows[2], call="create")
    rows[3] = dataclasses.replace(rows[3], call="attempt-07")  # not what the store makes an integer
    in_flight = reservation(rows[0], "attempt-2")
    unknown = unknown_video_row("videos", "v1", "key-unknown")
    store = CostStore(tmp_path / "costs.sqlite")
    try:
        store.record_many([*rows, in_flight])
        store.record(unknown)
        read = {record["id"]: record for record in store.records()}
    finally:
        store.close()

    expected = [flat_record(row) for row in [*rows, in_flight, unknown]]
    assert len(read) == len(expected)
    for record in expected:
        assert typed(read[record["id"]]) == typed(record)


def test_a_charge_takes_its_reservations_place_and_leaves_no_reservation(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    charge = sample_rows()[0]
    store = CostStore(path)
    try:
        store.record_many([reservation(charge), reservation(sample_rows()[5])])
        assert [row["outcome"] for row in store.records()] == [RESERVED, RESERVED]
        store.record_many([dataclasses.replace(charge, call="attempt-1")], released=["key005:attempt-1"])
        records = list(store.records())
    finally:
        store.close()

    assert [(row["id"], row["outcome"]) for row in records] == [("key000:attempt-1", "charged")]
    assert raw(path, "select count(*) from reservations") == [(0,)]
    # attempt-N as the integer N, the time as integer microseconds, repeated texts as ids
    stored = raw(
        path, "select call, typeof(charged_at), typeof(run), typeof(price_paths), known_usd from charge_rows"
    )
    assert stored == [(1, "integer", "integer", "integer", None)]  # known_usd: usd's text, not twice
    assert records[0]["known_usd"] == records[0]["usd"] == str(charge.cost.usd)
    assert raw(path, "select count(*) from texts where text = 'demo'") == [(1,)]


def test_reservations_left_open_become_unknown_at_their_worst_case(tmp_path: Path) -> None:
    rows = sample_rows()
    store = CostStore(tmp_path / "costs.sqlite")
    try:
        store.record_many([rows[0], reservation(rows[1])])
        assert store.reservations_to_unknown() == 1
        unknown = store.unknown_outcomes()
        spent, _ = store.spent()
    finally:
        store.close()

    unknown_cost = CallCost((), "base", ("outcome unknown",))
    expected = flat_record(dataclasses.replace(reservation(rows[1]), cost=unknown_cost, outcome=UNKNOWN))
    assert [typed(row) for row in unknown] == [typed(expected)]
    assert spent == rows[0].cost.usd + Decimal("0.25")


def layout0_store(folder: Path) -> Path:
    path = folder / "costs.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(FIXTURE.read_text(encoding="utf-8"))
    connection.close()
    return path


def old_rows(path: Path) -> list[dict[str, Any]]:
    """The rows as the old layout had them, and null for a column added since (each row's execution)."""
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        rows = connection.execute("select * from charges order by charged_at, id")
        return [{**dict(row), "execution": None} for row in rows]
    finally:
        connection.close()


def test_a_layout0_store_reads_the_same_after_its_migration(tmp_path: Path) -> None:
    path = layout0_store(tmp_path)
    before = old_rows(path)
    assert raw(path, "pragma user_version") == [(0,)]
    assert [row["outcome"] for row in before] == ["charged", "charged", RESERVED, UNKNOWN]

    store = CostStore(path)
    try:
        records = list(store.records())
        assert [row.pop("wasted") for row in records] == [0] * len(before)  # layout 2 added it
        assert [typed(row) for row in records] == [typed(row) for row in before]
        assert [model for model, _, _ in store.saved_prices()] == ["relay-chat-small"]
        columns = ("usd", "known_usd", "reserved_usd", "charged_at")
        since = sorted(store.charges_since(columns), key=lambda row: row["charged_at"])
        assert since == [{name: row[name] for name in columns} for row in before]
        write_ledger(store, tmp_path / "ledger.parquet")
    finally:
        store.close()
    assert raw(path, "pragma user_version") == [(SCHEMA_VERSION,)]
    assert raw(path, "select type from sqlite_schema where name = 'charges'") == [("view",)]
    assert raw(path, "select count(*) from reservations") == [(1,)]

    store = CostStore(path)  # opened again: nothing to migrate, the same rows
    try:
        again = [{name: value for name, value in row.items() if name != "wasted"} for row in store.records()]
        assert [typed(row) for row in again] == [typed(row) for row in before]
        # the money invariants go on: the open reservation is an unknown outcome at its worst
        # case, and an unknown outcome can be resolved by its id
        assert store.reservations_to_unknown() == 1
        spent, per_job = store.spent()
        assert spent == sum(
            Decimal(row["usd"] or max(Decimal(row["known_usd"]), Decimal(row["reserved_usd"] or 0)))
            for row in before
        )
        assert per_job["videos"] == Decimal("0.40")
        assert store.resolve("aa11bb22cc33dd44ee55ff6600778899:create", Decimal("0.40"))
        assert not store.resolve("aa11bb22cc33dd44ee55ff6600778899:create", None)  # already resolved
        assert [row["outcome"] for row in store.unknown_outcomes()] == [UNKNOWN]  # the reservation's
    finally:
        store.close()


def test_a_new_charge_keeps_its_place_among_migrated_rows(tmp_path: Path) -> None:
    path = layout0_store(tmp_path)
    store = CostStore(path)
    try:
        later = dataclasses.replace(sample_rows(run="chat-20000")[0], charged_at=START + timedelta(days=10))
        store.record(later)
        records = list(store.records())
    finally:
        store.close()
    assert len(records) == 5 and typed(records[-1]) == typed(flat_record(later))


def layout1_store(folder: Path) -> Path:
    """A store as layout 1 left it: charge rows without ``wasted`` (layout 2) and ``execution``
    (layout 3), reservations without ``execution``, the view without them."""
    path = folder / "costs.sqlite"
    store = CostStore(path)
    try:
        store.record_many(sample_rows()[:2])
    finally:
        store.close()
    connection = sqlite3.connect(path)
    view = connection.execute("select sql from sqlite_schema where name = 'charges'").fetchone()[0]
    old_view = (
        view.replace(", wasted, execution)", ")")
        .replace(", c.wasted, c.execution from charge_rows", " from charge_rows")
        .replace(", 0, c.execution from reservations", " from reservations")
    )
    connection.executescript(
        "drop view charges; alter table charge_rows drop column wasted; "
        "alter table charge_rows drop column execution; alter table reservations drop column execution; "
        f"{old_view}; pragma user_version = 1;"
    )
    connection.close()
    return path


def test_a_layout1_store_gets_wasted_and_reads_the_same(tmp_path: Path) -> None:
    path = layout1_store(tmp_path)
    reader = CostStore.open_read_only(path)  # read as it is: no wasted column, read as null
    assert reader is not None
    try:
        before = list(reader.charges_since(["id", "usd", "wasted"]))
    finally:
        reader.close()
    assert [row["wasted"] for row in before] == [None, None]

    store = CostStore(path)  # opened for writing: migrated
    try:
        after = list(store.charges_since(["id", "usd", "wasted"]))
    finally:
        store.close()
    assert raw(path, "pragma user_version") == [(SCHEMA_VERSION,)]
    assert [(row["id"], row["usd"]) for row in after] == [(row["id"], row["usd"]) for row in before]
    assert [row["wasted"] for row in after] == [0, 0]
