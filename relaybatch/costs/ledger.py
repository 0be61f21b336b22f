"""The cost ledger: one row per billable call, kept in SQLite during the run, exported to Parquet.

Rows are written to the run's ``costs.sqlite`` no later than the checkpoint commit of the item
state they belong to (the spend guard queues them and the engine commits them first), so a crash
loses no charge the run's items account for, and a resumed run knows what it already spent.
``write_ledger`` turns them into ``ledger.parquet`` with money as Arrow decimal128(38, 18): exact,
never float.

The store keeps each fact once (docs/costs.md, "The cost store"): settled rows in ``charge_rows``
(``WITHOUT ROWID``, keyed by ``(item_key, call)``: no separate id or index; ``attempt-N`` kept as
the integer N; ``charged_at`` as integer microseconds; run, job, model and price paths as ids of
``texts``; ``known_usd`` null when it is ``usd``), calls in flight in the narrow ``reservations``
(a row moves to ``charge_rows`` when it settles, so no wide row is ever rewritten), and the view
``charges`` shows both with the ledger's columns exactly as before. ``PRAGMA user_version`` is the layout: 0
for stores made before it (one ``charges`` table), migrated when opened for writing; a reader beside a
running execution opens it read-only (``CostStore.open_read_only``) and reads any layout as it is.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from relaybatch.arrow_memory import RowGroupWriter, release_unused
from relaybatch.cost_model import COMPONENTS, CallCost, ModelPrices, UsageCounts
from relaybatch.export_marks import is_current, marked
from relaybatch.files import replaced_atomically
from relaybatch.lean_imports import arrow_without_pandas, import_sqlite_utils
from relaybatch.sqlite_batches import copy_database, transaction

if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = import_sqlite_utils()  # without pandas (lean_imports.py)
arrow_without_pandas()

MONEY = pa.decimal128(38, 18)
CHARGED, RESERVED, UNKNOWN, NOT_CHARGED = "charged", "reserved", "unknown", "not charged"
# A done answer taken from another run instead of sending (run/reuse.py): 0 USD here; its ``call``
# names the run and the call of the original charge ("reused:<run>:<call>").
REUSED = "reused"
OUTCOME_UNKNOWN = "outcome unknown"
EXPORT_BATCH_ROWS = 10_000  # rows per row group of the ledger Parquet
CONVERT_ROWS = 1_000  # rows read and converted at a time
LEDGER_EXPORT = "ledger"

USAGE_COLUMNS = tuple(item.name for item in fields(UsageCounts) if item.name != "quote_usd")
SECONDS_COLUMNS = frozenset({"audio_seconds", "video_seconds", "video_seconds_with_audio"})
# PRAGMA user_version of the store's layout (0: one "charges" table; 1: charge_rows and
# reservations; 2 added charge_rows.wasted; 3 each row's execution)
SCHEMA_VERSION = 3
# Columns kept as the id of a text in ``texts``: long and repeated on every row.
TEXT_ID_COLUMNS = ("run", "job", "model", "price_paths")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTEMPT = "attempt-"


@dataclass(frozen=True)
class LedgerRow:
    """One billable call: who, what, how much of each unit, at which price, for how many USD."""

    run: str
    job: str
    item_id: str
    item_key: str
    kind: str
    model: str
    provider: str | None
    usage: UsageCounts
    cost: CallCost
    charged_at: datetime
    remote_id: str | None = None
    latency_seconds: float | None = None  # a duration for the dashboard, not money
    call: str = "create"  # which billed request of the item: the guard writes "attempt-N"
    reserved_usd: Decimal | None = None  # the worst case the budget held for the call
    # "charged"; "reserved": admitted by the budget, about to be sent or in flight (durable before
    # the send, so a crash cannot forget it); "unknown": sent with no answer recorded (crash,
    # dropped connection, timeout), counted at its worst case until resolved.
    outcome: str = CHARGED
    # A structured answer that did not fit its schema (re-asked or given up on): spend that
    # bought nothing; the report splits spend into useful and wasted by it.
    wasted: bool = False
    execution: int | None = None  # the execution that sent the call (the checkpoint's executions)

    @property
    def usd(self) -> Decimal | None:
        return self.cost.usd


def build_row(
    *,
    run: str,
    job: str,
    item_id: str,
    item_key: str,
    kind: str,
    model: str,
    provider: str | None,
    usage: UsageCounts,
    cost: CallCost,
    remote_id: str | None = None,
    latency_seconds: float | None = None,
    charged_at: datetime | None = None,
    reserved_usd: Decimal | None = None,
    outcome: str = "charged",
    call: str = "create",
    wasted: bool = False,
    execution: int | None = None,
) -> LedgerRow:
    return LedgerRow(
        run=run,
        job=job,
        item_id=item_id,
        item_key=item_key,
        kind=kind,
        model=model,
        provider=provider,
        usage=usage,
        cost=cost,
        remote_id=remote_id,
        latency_seconds=latency_seconds,
        charged_at=charged_at or datetime.now(UTC),
        reserved_usd=reserved_usd,
        outcome=outcome,
        call=call,
        wasted=wasted,
        execution=execution,
    )


def _text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def flat_record(row: LedgerRow) -> dict[str, Any]:
    """The row as flat columns; Decimals as strings (SQLite has no exact decimal type)."""
    record: dict[str, Any] = {
        "id": f"{row.item_key}:{row.call}",
        "run": row.run,
        "job": row.job,
        "item_id": row.item_id,
        "item_key": row.item_key,
        "call": row.call,
        "kind": row.kind,
        "model": row.model,
        "provider": row.provider,
        "remote_id": row.remote_id,
        "tier": row.cost.tier,
    }
    for name in USAGE_COLUMNS:
        value = getattr(row.usage, name)
        record[name] = str(value) if name in SECONDS_COLUMNS else value
    record["quote_usd"] = _text(row.usage.quote_usd)
    parts = {part.name: part for part in row.cost.components}
    for name in COMPONENTS:
        part = parts.get(name)
        record[f"price_{name}"] = _text(part.unit_price) if part else None
        record[f"usd_{name}"] = _text(part.usd) if part else None
    record["price_paths"] = json.dumps({part.name: part.price_path for part in row.cost.components})
    record["unknown_prices"] = ",".join(row.cost.unknown) or None
    record["priced"] = not row.cost.unknown
    record["usd"] = _text(row.cost.usd)
    record["known_usd"] = str(row.cost.known_usd)
    record["reserved_usd"] = _text(row.reserved_usd)
    record["outcome"] = row.outcome
    record["charged_at"] = row.charged_at.astimezone(UTC).isoformat(timespec="microseconds")
    record["latency_seconds"] = row.latency_seconds
    record["wasted"] = row.wasted
    record["execution"] = row.execution
    return record


def budget_amount(record: Mapping[str, Any]) -> Decimal:
    """What the budget counts for a row: its cost, or when that is not known its worst case."""
    if record["usd"] is not None:
        return Decimal(record["usd"])
    return max(Decimal(record["known_usd"]), Decimal(record["reserved_usd"] or 0))


def known_amount(record: Mapping[str, Any]) -> Decimal:
    """The part of a row's cost that is known (its whole cost when it is priced)."""
    return Decimal(record["usd"] if record["usd"] is not None else record["known_usd"])


def unknown_amount(record: Mapping[str, Any]) -> Decimal:
    """The worst case the budget still holds beyond the known part (0 for a priced charge).

    The one split every money figure uses (report, dashboard, Prefect summary, progress line):
    known = ``known_amount``, unknown = this, and their sum is ``budget_amount``, what the
    budget counts as spent."""
    return budget_amount(record) - known_amount(record)


def ledger_schema() -> pa.Schema:
    columns: list[tuple[str, pa.DataType]] = [
        ("run", pa.string()),
        ("job", pa.string()),
        ("item_id", pa.string()),
        ("item_key", pa.string()),
        ("call", pa.string()),
        ("kind", pa.string()),
        ("model", pa.string()),
        ("provider", pa.string()),
        ("remote_id", pa.string()),
        ("tier", pa.string()),
    ]
    columns += [(name, MONEY if name in SECONDS_COLUMNS else pa.int64()) for name in USAGE_COLUMNS]
    columns.append(("quote_usd", MONEY))
    for name in COMPONENTS:
        columns += [(f"price_{name}", MONEY), (f"usd_{name}", MONEY)]
    columns += [
        ("price_paths", pa.string()),
        ("unknown_prices", pa.string()),
        ("priced", pa.bool_()),
        ("usd", MONEY),
        ("known_usd", MONEY),
        ("reserved_usd", MONEY),
        ("outcome", pa.string()),
        ("charged_at", pa.timestamp("us", tz="UTC")),
        ("latency_seconds", pa.float64()),
        ("wasted", pa.bool_()),  # layout 2
        ("execution", pa.int64()),
    ]
    return pa.schema(columns)


def _sqlite_columns() -> dict[str, type]:
    """SQLite column types for the ledger: exact decimals as text, counts as integers."""
    kinds: dict[str, type] = {"id": str}
    for column in ledger_schema():
        if pa.types.is_integer(column.type) or pa.types.is_boolean(column.type):
            kinds[column.name] = int
        elif pa.types.is_floating(column.type):
            kinds[column.name] = float
        else:
            kinds[column.name] = str
    return kinds


@dataclass(frozen=True)
class SpendTotals:
    """Sums over every charge of a store: what the budget counts (``budget_amount``), the part of
    it that is unknown (``unknown_amount``), and what it counts per job."""

    spent: Decimal
    unknown: Decimal
    by_job: Mapping[str, Decimal]

    def to_json(self) -> str:
        by_job = {job: str(usd) for job, usd in self.by_job.items()}
        return json.dumps({"spent": str(self.spent), "unknown": str(self.unknown), "by_job": by_job})

    @classmethod
    def from_json(cls, text: str) -> SpendTotals:
        values = json.loads(text)
        by_job = {job: Decimal(usd) for job, usd in values["by_job"].items()}
        return cls(Decimal(values["spent"]), Decimal(values["unknown"]), by_job)


class CostStore:
    """The run's money in one SQLite file: prices fetched, charges settled."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path, self.read_only = path, read_only
        if read_only:
            # mode=ro: never creates the file, takes a write lock or migrates (see open_read_only);
            # query_only: refuses any write this connection is asked for, temporary tables too.
            uri = f"{path.resolve().as_uri()}?mode=ro"
            connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA query_only=1")
            connection.execute("PRAGMA busy_timeout=10000")
            self.db = sqlite_utils.Database(connection)
            self._check_layout()
            self._text_ids: dict[str, int] = {}
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        # As the checkpoint store: WAL + NORMAL survives a crash of the process, and commits are cheap.
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=10000")
        self.db = sqlite_utils.Database(connection)
        self.db.table("prices").create(
            {"model": str, "provider": str, "fetched_at": str, "pricing": str},
            pk=("model", "provider"),
            if_not_exists=True,
        )
        # One row counting the writes to charges (with the store's creation time): the ledger
        # Parquet carries it, so an unchanged store is not exported again (export_marks.py).
        self.db.execute(
            "create table if not exists changes (id integer primary key, created_at text, count integer, "
            "totals_at integer, totals text)"
        )
        for column, kind in (("totals_at", int), ("totals", str)):  # added later
            if column not in self.db.table("changes").columns_dict:
                self.db.table("changes").add_column(column, kind)
        self.db.execute(
            "insert or ignore into changes (id, created_at, count) values (1, ?, 0)",
            [datetime.now(UTC).isoformat(timespec="microseconds")],
        )
        self._create_layout()
        self._text_ids = {text: id for id, text in connection.execute("select id, text from texts")}

    @classmethod
    def open_read_only(cls, path: Path) -> CostStore | None:
        """The store as it is, for a reader beside a running execution (``relaybatch status``), or
        None when there is nothing to read yet: no file (nothing spent yet), or one whose tables
        are still being created. WAL lets it read while the execution writes; it never writes,
        never creates the file, and reads an older layout as it is, unmigrated (layout 0's
        ``charges`` table has the columns the view shows). The store's file is never changed; SQLite
        may create the empty ``-wal`` and ``-shm`` side files a WAL reader needs when no writer
        has them open."""
        if not path.is_file():
            return None
        store = cls(path, read_only=True)
        if store.db.execute("select 1 from sqlite_schema where name = 'charges'").fetchone() is None:
            store.close()
            return None
        return store

    def layout(self) -> int:
        """The store's layout (``PRAGMA user_version``); below SCHEMA_VERSION, the first open for
        writing migrates it."""
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def copy_to(self, path: Path) -> None:
        """The whole store as it is now, copied to ``path`` in one short read (SQLite's online
        backup): the ledger beside an execution is exported from the copy (run/snapshot.py)."""
        copy_database(self.db.conn, path)

    def _check_layout(self) -> int:
        version: int = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{self.path}: cost store layout {version} is newer than this relaybatch's "
                f"({SCHEMA_VERSION}); open it with a newer relaybatch"
            )
        return version

    def _create_layout(self) -> None:
        if self._check_layout() == SCHEMA_VERSION:
            return
        with transaction(self.db.conn):  # all or nothing: a crash leaves the old layout
            tables = {row[0]: row[1] for row in self.db.execute("select name, type from sqlite_schema")}
            if tables.get("charges") == "view":
                self._add_columns()  # layouts 1 and 2: the view without wasted, or execution
                return
            for statement in _LAYOUT_SQL:
                self.db.execute(statement)
            if tables.get("charges") == "table":
                self._migrate_charges()
            self.db.execute(_VIEW_SQL)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _add_columns(self) -> None:
        """Layout 1 to 2: charge rows get ``wasted`` (0 for every row before it); 2 to 3: charge rows
        and reservations get ``execution`` (null: sent before executions were recorded); the view
        shows them."""
        version = self._check_layout()
        if version >= SCHEMA_VERSION:
            return  # another process migrated it first
        if version < 2:
            self.db.execute("alter table charge_rows add column wasted integer default 0")
        for table in ("charge_rows", "reservations"):
            self.db.execute(f"alter table {table} add column execution integer")
        self.db.execute("drop view charges")
        self.db.execute(_VIEW_SQL)
        self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _migrate_charges(self) -> None:
        """Layout 0 to 1: the rows of the one wide ``charges`` table move to ``charge_rows`` (and
        reservations still open to ``reservations``), as ``record_many`` would have written them."""
        self.db.conn.create_function("rb_micros", 1, _iso_micros, deterministic=True)
        self.db.conn.create_function("rb_call", 1, _call_value, deterministic=True)
        present = {row[1] for row in self.db.execute("pragma table_info(charges)")}
        for column in TEXT_ID_COLUMNS:
            if column in present:
                self.db.execute(
                    f"insert or ignore into texts (text) select distinct {column} from charges "
                    f"where {column} is not null"
                )

        def value(column: str) -> str:
            if column not in present:
                return "0" if column == "wasted" else "null"
            if column in TEXT_ID_COLUMNS:
                return f"(select id from texts where text = c.{column})"
            converted = {
                "call": "rb_call(c.call)",
                "charged_at": "rb_micros(c.charged_at)",
                "known_usd": "nullif(c.known_usd, c.usd)",
            }
            return converted.get(column, f"c.{column}")

        self.db.execute(
            f"insert or replace into charge_rows ({', '.join(_CHARGE_COLUMNS)}) "
            f"select {', '.join(value(column) for column in _CHARGE_COLUMNS)} from charges c "
            "where c.outcome is not ? order by c.rowid",
            [RESERVED],
        )
        self.db.execute(
            f"insert or replace into reservations ({', '.join(_RESERVATION_COLUMNS)}) "
            f"select {', '.join(value(column) for column in _RESERVATION_COLUMNS)} from charges c "
            "where c.outcome = ? order by c.rowid",
            [RESERVED],
        )
        self.db.execute("drop table charges")

    def close(self) -> None:
        self.db.conn.close()

    def _ids(self, texts: set[str]) -> dict[str, int]:
        """Ids of ``texts`` in ``texts``, adding the new ones; inside the caller's transaction
        (so the cache learns them only once it commits: see ``record_many``)."""
        found = {text: self._text_ids[text] for text in texts if text in self._text_ids}
        for text in texts - found.keys():
            self.db.conn.execute("insert or ignore into texts (text) values (?)", [text])
            found[text] = self.db.conn.execute("select id from texts where text = ?", [text]).fetchone()[0]
        return found

    def record(self, row: LedgerRow) -> None:
        """Store one settled charge (committed on return); settling the same call twice keeps one row."""
        self.record_many([row])

    def record_many(self, rows: Sequence[LedgerRow], released: Sequence[str] = ()) -> None:
        """Store rows (reservations and charges) and drop released reservations (row ids), in one
        transaction (committed on return; all or none). A row replaces the one with its id; a
        charge replaces the call's reservation."""
        if not rows and not released:
            return
        reserved = [row for row in rows if row.outcome == RESERVED]
        settled = [row for row in rows if row.outcome != RESERVED]
        texts = {text for row in rows for text in _texts(row) if text is not None}
        with transaction(self.db.conn):
            ids = self._ids(texts)
            if released:
                self.db.conn.executemany(
                    "delete from reservations where item_key = ? and call = ?", map(_id_parts, released)
                )
            if reserved:
                self.db.conn.executemany(_RESERVE_SQL, [_reservation_values(row, ids) for row in reserved])
            if settled:
                self.db.conn.executemany(
                    "delete from reservations where item_key = ? and call = ?",
                    [(row.item_key, _call_value(row.call)) for row in settled],
                )
                # Row by row: a ledger row has about 45 columns, and reading that many out of a
                # JSON array (sqlite_batches) costs more than twice executemany's binding
                # (measured: 67 against 26 us per row in groups of 20, benchmarks/RESULTS.md).
                self.db.conn.executemany(_CHARGE_SQL, [_charge_values(row, ids) for row in settled])
            self._changed()
        self._text_ids.update(ids)  # committed: ids of texts added are now for good

    def reservations_to_unknown(self) -> int:
        """Reservations an earlier execution left (it ended, or died, with those calls in flight)
        become unknown outcomes: each may have been billed, so each keeps its worst case."""
        with transaction(self.db.conn):
            cursor = self.db.conn.execute(_RESERVATIONS_TO_UNKNOWN_SQL, [OUTCOME_UNKNOWN, UNKNOWN])
            self.db.conn.execute("delete from reservations")
            if cursor.rowcount:
                self._changed()
        return cursor.rowcount

    def _changed(self) -> None:
        """Inside every transaction that writes charges."""
        self.db.execute("update changes set count = count + 1 where id = 1")

    def change_mark(self) -> str:
        """Text that changes whenever the charges may have changed (the ledger's source)."""
        row = self.db.execute("select created_at, count from changes where id = 1").fetchone()
        return f"{row[0]}/{row[1]}" if row else ""

    def outputs_by_job_and_model(self) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        """(items, calls, output tokens, reasoning tokens) of the charged calls, per (job, model):
        what a later plan of the same job learns its answers' length, and its calls an item (a
        structured job's re-asks), from (costs/observed.py)."""
        sql = (
            "select job, model, count(distinct item_key), count(*), coalesce(sum(output_tokens), 0), "
            "coalesce(sum(reasoning_tokens), 0) from charges where outcome = ? group by job, model"
        )
        return {
            (str(job), str(model)): (int(items), int(calls), int(output), int(reasoning))
            for job, model, items, calls, output, reasoning in self.db.execute(sql, [CHARGED])
        }

    def unknown_outcomes(self) -> list[dict[str, Any]]:
        """Rows whose outcome is unknown, oldest first (a person or a later poll may resolve them)."""
        cursor = self.db.conn.execute(
            "select * from charges where outcome in (?, ?) order by charged_at, id", [UNKNOWN, RESERVED]
        )
        names = [description[0] for description in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor]

    def resolve(self, row_id: str, charged_usd: Decimal | None) -> bool:
        """Settle an unknown outcome: charged ``charged_usd`` (as the gateway's bill shows), or not
        charged at all (None). False when no unknown row has that id."""
        key, call = _id_parts(row_id)
        with transaction(self.db.conn):
            if charged_usd is None:
                cursor = self.db.conn.execute(
                    "update charge_rows set outcome = ?, usd = '0', known_usd = '0', unknown_prices = null, "
                    "priced = 1 where item_key = ? and call = ? and outcome = ?",
                    [NOT_CHARGED, key, call, UNKNOWN],
                )
            else:
                cursor = self.db.conn.execute(
                    "update charge_rows set outcome = ?, usd = ?, known_usd = ?, unknown_prices = null, "
                    "priced = 1 where item_key = ? and call = ? and outcome = ?",
                    [CHARGED, str(charged_usd), str(charged_usd), key, call, UNKNOWN],
                )
            if cursor.rowcount:
                self._changed()
        return cursor.rowcount > 0

    def charged_calls(self, item_keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """For each of ``item_keys`` with a charge here (charged, or itself reused), the last such
        charge's call, model, provider and remote id: what a run reusing the answer refers to."""
        sql = (
            "select item_key, call, model, provider, remote_id from charges "
            "where item_key in (select value from json_each(?)) and outcome in (?, ?) order by charged_at"
        )
        rows = self.db.conn.execute(sql, [json.dumps(list(item_keys)), CHARGED, REUSED])
        return {
            key: {"call": str(call), "model": model, "provider": provider, "remote_id": remote_id}
            for key, call, model, provider, remote_id in rows
        }

    def records(self) -> Iterator[dict[str, Any]]:
        cursor = self.db.conn.execute("select * from charges order by charged_at, id")
        names = [description[0] for description in cursor.description]
        for values in cursor:
            yield dict(zip(names, values, strict=True))

    def charges_since(self, columns: Sequence[str], since: str = "") -> Iterator[dict[str, Any]]:
        """``columns`` of every charge made on or after ``since`` (an ISO date; "" for all)."""
        unknown = set(columns) - {"id", *_COLUMN_NAMES}
        if unknown:
            raise ValueError(f"no such ledger columns: {sorted(unknown)}")
        # A store of an earlier layout read as it is lacks the later columns: they read as null.
        present = {row[1] for row in self.db.conn.execute("pragma table_info(charges)")}
        shown = [column if column in present or column == "id" else "null" for column in columns]
        # No ``where`` for all: the view makes each row's ISO time only for a query that reads it.
        sql = f"select {', '.join(shown)} from charges" + (" where charged_at >= ?" if since else "")
        for values in self.db.conn.execute(sql, [since] if since else []):
            yield dict(zip(columns, values, strict=True))

    def execution_spend(self, execution: int) -> tuple[Decimal, Decimal]:
        """(known, unknown) USD of the calls ``execution`` sent, as the report splits them."""
        known, unknown = Decimal(0), Decimal(0)
        if "execution" not in {row[1] for row in self.db.execute("pragma table_info(charges)")}:
            return known, unknown  # an older layout read as it is: no row says its execution
        sql = "select usd, known_usd, reserved_usd from charges where execution = ?"
        for usd, known_usd, reserved_usd in self.db.conn.execute(sql, [execution]):
            record = {"usd": usd, "known_usd": known_usd, "reserved_usd": reserved_usd}
            known += known_amount(record)
            unknown += unknown_amount(record)
        return known, unknown

    def spent_since(self, since: str) -> Decimal:
        """What the budget counts as spent by calls made on or after ``since`` (ISO UTC time)."""
        total = Decimal(0)
        for record in self.charges_since(("usd", "known_usd", "reserved_usd"), since):
            total += budget_amount(record)
        return total

    def spent(self) -> tuple[Decimal, dict[str, Decimal]]:
        """USD the budget counts as spent, for the run and per job.

        A row whose cost is unknown counts the worst case reserved for it (or what is known,
        if more): a budget must not forget money that may have been charged.
        """
        totals = self._totals()
        return totals.spent, dict(totals.by_job)

    def unknown_spent(self) -> Decimal:
        """The worst case the budget holds beyond what is known, over every row (``unknown_amount``)."""
        return self._totals().unknown

    def _totals(self) -> SpendTotals:
        """The sums over every charge, kept beside the change count they were made at: a resumed
        million-call run reads them back instead of summing a million rows before its first send.
        Made afresh (one pass, exact decimals) when a write has moved the count since."""
        found = (  # a read-only open of a store from before ``changes`` existed: no saved sums
            self.db.execute("select count, totals_at, totals from changes where id = 1").fetchone()
            if not self.read_only or self.db.table("changes").exists()
            else None
        )
        count, totals_at, saved = found if found else (None, None, None)
        if saved and totals_at == count:
            return SpendTotals.from_json(saved)
        total, known, per_job = Decimal(0), Decimal(0), dict[str, Decimal]()
        for job, usd, known_usd, reserved_usd in self.db.execute(
            "select job, usd, known_usd, reserved_usd from charges"
        ):
            record = {"usd": usd, "known_usd": known_usd, "reserved_usd": reserved_usd}
            amount = budget_amount(record)
            total += amount
            known += known_amount(record)
            per_job[job] = per_job.get(job, Decimal(0)) + amount
        totals = SpendTotals(total, total - known, per_job)
        if (
            count is not None
            and not self.read_only
            and self.db.execute("select count from changes where id = 1").fetchone()[0] == count
        ):
            # No write between the two reads of the count (each write moves it in its own
            # transaction), so the sums are those of the rows at ``count``.
            with transaction(self.db.conn):
                self.db.execute(
                    "update changes set totals_at = ?, totals = ? where id = 1 and count = ?",
                    [count, totals.to_json(), count],
                )
        return totals

    def save_prices(self, prices: ModelPrices, provider: str | None) -> None:
        with self.db.conn:
            self.db.table("prices").upsert(
                {
                    # "" stands for "no provider asked": a primary key column cannot hold NULL reliably.
                    "model": prices.model,
                    "provider": provider or "",
                    "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "pricing": json.dumps(prices.source, sort_keys=True),
                },
                pk=("model", "provider"),
            )

    def saved_prices(self) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
        for record in self.db.table("prices").rows:
            yield record["model"], record["provider"] or None, json.loads(record["pricing"])


@functools.lru_cache(maxsize=32)
def _nulls(length: int, type_: pa.DataType) -> pa.Array:
    """An all-null column, made once per length and type and shared by every batch that has one."""
    return pa.nulls(length, type_)


def _column(values: Sequence[Any], column: pa.Field) -> pa.Array:
    if not any(value is not None for value in values):
        # Most of the ledger's 61 columns are empty for a kind (a chat row has no image, audio or
        # video prices): shared, they hold no memory per row group (35 decimal columns are 16
        # bytes a row each, null or not).
        return _nulls(len(values), column.type)
    if column.type == MONEY or pa.types.is_timestamp(column.type):
        try:
            # Exact text to exact decimal; a value with more than 18 decimals is refused, not rounded.
            return pa.array(values, pa.string()).cast(column.type)
        except pa.ArrowInvalid as error:
            raise ValueError(f"ledger column {column.name}: {error}") from None
    if pa.types.is_boolean(column.type):
        return pa.array([None if value is None else bool(value) for value in values], pa.bool_())
    return pa.array(values, column.type)


def ledger_table(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows of the cost store, in ledger-schema column order, as an Arrow table."""
    schema = ledger_schema()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [_column(values, column) for values, column in zip(columns, schema, strict=True)], schema=schema
    )


# -- the store's layout ---------------------------------------------------------------------

_COLUMN_NAMES = tuple(column.name for column in ledger_schema())  # the ledger's, as the view shows them
_CHARGE_COLUMNS = ("item_key", "call", *(name for name in _COLUMN_NAMES if name not in ("item_key", "call")))
# What a call in flight has that is not the same for every reservation.
_RESERVATION_COLUMNS = (
    "item_key",
    "call",
    "run",
    "job",
    "item_id",
    "kind",
    "model",
    "provider",
    "remote_id",
    "tier",
    "unknown_prices",
    "reserved_usd",
    "charged_at",
    "execution",
)


def _sql_type(name: str) -> str:
    if name in TEXT_ID_COLUMNS or name == "charged_at":
        return "integer"
    return {int: "integer", float: "real"}.get(_sqlite_columns().get(name, str), "text")


_LAYOUT_SQL = (
    "create table if not exists texts (id integer primary key, text text not null unique)",
    "create table if not exists charge_rows ("
    # call: no declared type, so "attempt-N" kept as an integer and any other label as text
    + ", ".join(f"{name} {'' if name == 'call' else _sql_type(name)}" for name in _CHARGE_COLUMNS)
    + ", primary key (item_key, call)) without rowid",
    "create table if not exists reservations ("
    + ", ".join(f"{name} {'' if name == 'call' else _sql_type(name)}" for name in _RESERVATION_COLUMNS)
    + ", primary key (item_key, call)) without rowid",
)


def _unreserved(name: str) -> str:
    """A column a reservation does not keep, as it is for every reservation (``RunSpendGuard.reserve``
    builds them with no usage and no cost yet), in SQL."""
    if name in SECONDS_COLUMNS or name == "known_usd":
        return "'0'"
    if name in USAGE_COLUMNS or name in ("priced", "wasted"):
        return "0"
    if name == "outcome":
        return f"'{RESERVED}'"
    return "null"


def _shown(name: str, table: str) -> str:
    """A ledger column as the view shows it, from ``table`` (alias ``c``)."""
    if name == "id":
        return f"c.item_key || ':' || {_shown('call', table)}"
    if name == "call":
        return f"case typeof(c.call) when 'integer' then '{_ATTEMPT}' || c.call else c.call end"
    if table == "reservations" and name not in _RESERVATION_COLUMNS:
        return "'{}'" if name == "price_paths" else _unreserved(name)
    if name == "charged_at":  # integer microseconds as the ISO text flat_record writes
        return (
            "strftime('%Y-%m-%dT%H:%M:%S', c.charged_at / 1000000, 'unixepoch') "
            "|| printf('.%06d+00:00', c.charged_at % 1000000)"
        )
    if name == "price_paths":
        return "coalesce((select text from texts where id = c.price_paths), '{}')"
    if name in TEXT_ID_COLUMNS:
        return f"(select text from texts where id = c.{name})"
    if name == "known_usd":  # null when it is the whole cost (a priced row): the same text twice
        return "coalesce(c.known_usd, c.usd)"
    return f"c.{name}"


_VIEW_NAMES = ("id", *_COLUMN_NAMES)
_VIEW_SQL = (
    f"create view charges ({', '.join(_VIEW_NAMES)}) as "
    f"select {', '.join(_shown(name, 'charge_rows') for name in _VIEW_NAMES)} from charge_rows c union all "
    f"select {', '.join(_shown(name, 'reservations') for name in _VIEW_NAMES)} from reservations c"
)
# Reservations left open become unknown outcomes at their worst case (outcome, why: parameters).
_RESERVATIONS_TO_UNKNOWN_SQL = (
    f"insert or replace into charge_rows ({', '.join(_CHARGE_COLUMNS)}) select "
    + ", ".join(
        "?"
        if name in ("unknown_prices", "outcome")
        else name
        if name in _RESERVATION_COLUMNS
        else "null"
        if name == "price_paths"
        else _unreserved(name)
        for name in _CHARGE_COLUMNS
    )
    + " from reservations"
)
_CHARGE_SQL = (
    f"insert or replace into charge_rows ({', '.join(_CHARGE_COLUMNS)}) "
    f"values ({', '.join('?' for _ in _CHARGE_COLUMNS)})"
)
_RESERVE_SQL = (
    f"insert or replace into reservations ({', '.join(_RESERVATION_COLUMNS)}) "
    f"values ({', '.join('?' for _ in _RESERVATION_COLUMNS)})"
)


def _call_value(call: str) -> str | int:
    """``attempt-N`` is kept as the integer N; any other label as its text."""
    if call.startswith(_ATTEMPT) and call[len(_ATTEMPT) :].isdigit():
        number = int(call[len(_ATTEMPT) :])
        if f"{_ATTEMPT}{number}" == call:
            return number
    return call


def _id_parts(row_id: str) -> tuple[str, str | int]:
    """A ledger row id (``<item key>:<call>``) as the store's key."""
    key, _, call = row_id.partition(":")
    return key, _call_value(call)


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _iso_micros(text: str | None) -> int | None:
    return None if text is None else _micros(datetime.fromisoformat(text).astimezone(UTC))


def _texts(row: LedgerRow) -> tuple[str | None, ...]:
    return row.run, row.job, row.model, _price_paths(row)


def _price_paths(row: LedgerRow) -> str | None:
    """The JSON of each price used's pricing path; None when no price was used ("{}")."""
    if not row.cost.components:
        return None
    return json.dumps({part.name: part.price_path for part in row.cost.components})


_NO_USAGE = UsageCounts()


def _reservation_values(row: LedgerRow, ids: Mapping[str, int]) -> list[Any]:
    if row.cost.components or row.cost.usd is not None or row.usage != _NO_USAGE:
        raise ValueError(f"a reservation carries no usage and no cost yet: {row.item_key}:{row.call}")
    return [
        row.item_key,
        _call_value(row.call),
        ids[row.run],
        ids[row.job],
        row.item_id,
        row.kind,
        ids[row.model],
        row.provider,
        row.remote_id,
        row.cost.tier,
        ",".join(row.cost.unknown) or None,
        _text(row.reserved_usd),
        _micros(row.charged_at),
        row.execution,
    ]


def _charge_values(row: LedgerRow, ids: Mapping[str, int]) -> list[Any]:
    """The row in ``_CHARGE_COLUMNS`` order: ``flat_record``'s values (the layout tests compare
    the two), built as a list directly (this runs once per billed call)."""
    usage, cost = row.usage, row.cost
    values: list[Any] = [
        row.item_key,
        _call_value(row.call),
        ids[row.run],
        ids[row.job],
        row.item_id,
        row.kind,
        ids[row.model],
        row.provider,
        row.remote_id,
        cost.tier,
    ]
    for name in USAGE_COLUMNS:
        values.append(str(getattr(usage, name)) if name in SECONDS_COLUMNS else getattr(usage, name))
    values.append(_text(usage.quote_usd))
    parts = {part.name: part for part in cost.components}
    for name in COMPONENTS:
        part = parts.get(name)
        values += (_text(part.unit_price), _text(part.usd)) if part else (None, None)
    paths = _price_paths(row)
    usd, known = _text(cost.usd), str(cost.known_usd)
    values += [
        None if paths is None else ids[paths],
        ",".join(cost.unknown) or None,
        not cost.unknown,
        usd,
        None if known == usd else known,
        _text(row.reserved_usd),
        row.outcome,
        _micros(row.charged_at),
        row.latency_seconds,
        row.wasted,
        row.execution,
    ]
    return values


def write_ledger(
    store: CostStore, path: Path, batch_rows: int = EXPORT_BATCH_ROWS, rewrite: bool = False
) -> Path:
    """Export the store to Parquet in batches (memory stays flat), under a temporary name, then rename.

    A ledger already exported from the store as it is now (the change mark in its footer) is kept,
    unless ``rewrite`` (`relaybatch export`: trust no mark)."""
    mark = store.change_mark()  # before reading: a write meanwhile makes the next export write again
    if mark and not rewrite and is_current(path, LEDGER_EXPORT, mark):
        return path
    release_unused()  # start from what is live: what the execution freed goes back first
    names = ", ".join(column.name for column in ledger_schema())
    cursor = store.db.conn.execute(f"select {names} from charges order by charged_at, id")
    schema = marked(ledger_schema(), LEDGER_EXPORT, mark) if mark else ledger_schema()
    with replaced_atomically(path) as temporary, RowGroupWriter(temporary, schema) as writer:
        # Rows are read and converted a thousand at a time and gathered as Arrow columns (compact)
        # into row groups of ``batch_rows``: 10,000 rows as Python tuples cost about 60 MB more
        # of peak memory than the whole rest of a run (benchmarks/RESULTS.md, "End to end").
        pending: list[pa.Table] = []
        gathered = 0
        while rows := cursor.fetchmany(min(batch_rows, CONVERT_ROWS)):
            pending.append(ledger_table(rows))
            gathered += len(rows)
            if gathered >= batch_rows:
                writer.write_table(pa.concat_tables(pending))
                pending, gathered = [], 0
                release_unused()  # each row group's buffers go back (arrow_memory.py)
        if pending:
            writer.write_table(pa.concat_tables(pending))
    return path
