"""``CostStore``: the run's money in one SQLite file (prices fetched, charges settled, calls in flight),
its layout checked and migrated when opened for writing, and every read of it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.cost_model import ModelPrices
from relaybatch.costs.ledger.layout import (
    CHARGE_COLUMNS,
    CHARGE_SQL,
    COLUMN_NAMES,
    LAYOUT_SQL,
    RESERVATION_COLUMNS,
    RESERVATIONS_TO_UNKNOWN_SQL,
    RESERVE_SQL,
    SCHEMA_VERSION,
    TEXT_ID_COLUMNS,
    VIEW_SQL,
    call_value,
    charge_values,
    id_parts,
    iso_micros,
    reservation_values,
    row_texts,
)
from relaybatch.costs.ledger.rows import (
    CHARGED,
    NOT_CHARGED,
    OUTCOME_UNKNOWN,
    RESERVED,
    REUSED,
    UNKNOWN,
    LedgerRow,
    budget_amount,
    known_amount,
    unknown_amount,
)
from relaybatch.lean_imports import import_sqlite_utils
from relaybatch.sqlite_batches import copy_database, transaction

if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = import_sqlite_utils()  # without pandas (lean_imports.py)


# Item keys read per query by ``spend_of_items`` (a JSON array each): a run with many failed items
# is read in steps, never one statement holding every key.
ITEM_KEYS_PER_QUERY = 5_000


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
            for statement in LAYOUT_SQL:
                self.db.execute(statement)
            if tables.get("charges") == "table":
                self._migrate_charges()
            self.db.execute(VIEW_SQL)
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
        self.db.execute(VIEW_SQL)
        self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _migrate_charges(self) -> None:
        """Layout 0 to 1: the rows of the one wide ``charges`` table move to ``charge_rows`` (and
        reservations still open to ``reservations``), as ``record_many`` would have written them."""
        self.db.conn.create_function("rb_micros", 1, iso_micros, deterministic=True)
        self.db.conn.create_function("rb_call", 1, call_value, deterministic=True)
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
            f"insert or replace into charge_rows ({', '.join(CHARGE_COLUMNS)}) "
            f"select {', '.join(value(column) for column in CHARGE_COLUMNS)} from charges c "
            "where c.outcome is not ? order by c.rowid",
            [RESERVED],
        )
        self.db.execute(
            f"insert or replace into reservations ({', '.join(RESERVATION_COLUMNS)}) "
            f"select {', '.join(value(column) for column in RESERVATION_COLUMNS)} from charges c "
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
        texts = {text for row in rows for text in row_texts(row) if text is not None}
        with transaction(self.db.conn):
            ids = self._ids(texts)
            if released:
                self.db.conn.executemany(
                    "delete from reservations where item_key = ? and call = ?", map(id_parts, released)
                )
            if reserved:
                self.db.conn.executemany(RESERVE_SQL, [reservation_values(row, ids) for row in reserved])
            if settled:
                self.db.conn.executemany(
                    "delete from reservations where item_key = ? and call = ?",
                    [(row.item_key, call_value(row.call)) for row in settled],
                )
                # Row by row: a ledger row has about 45 columns, and reading that many out of a
                # JSON array (sqlite_batches) costs more than twice executemany's binding
                # (measured: 67 against 26 us per row in groups of 20, benchmarks/RESULTS.md).
                self.db.conn.executemany(CHARGE_SQL, [charge_values(row, ids) for row in settled])
            self._changed()
        self._text_ids.update(ids)  # committed: ids of texts added are now for good

    def reservations_to_unknown(self) -> int:
        """Reservations an earlier execution left (it ended, or died, with those calls in flight)
        become unknown outcomes: each may have been billed, so each keeps its worst case."""
        with transaction(self.db.conn):
            cursor = self.db.conn.execute(RESERVATIONS_TO_UNKNOWN_SQL, [OUTCOME_UNKNOWN, UNKNOWN])
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
        key, call = id_parts(row_id)
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

    def spend_of_items(self, item_keys: Sequence[str]) -> dict[str, tuple[int, Decimal]]:
        """For each of ``item_keys`` with rows here: its calls and what the budget counts as spent on
        them (known, or the worst case where unknown: ``budget_amount``)."""
        sql = (
            "select item_key, usd, known_usd, reserved_usd from charges "
            "where item_key in (select value from json_each(?))"
        )
        found: dict[str, tuple[int, Decimal]] = {}
        for start in range(0, len(item_keys), ITEM_KEYS_PER_QUERY):
            chunk = json.dumps(list(item_keys[start : start + ITEM_KEYS_PER_QUERY]))
            for key, usd, known_usd, reserved_usd in self.db.conn.execute(sql, [chunk]):
                record = {"usd": usd, "known_usd": known_usd, "reserved_usd": reserved_usd}
                calls, spent = found.get(key, (0, Decimal(0)))
                found[key] = (calls + 1, spent + budget_amount(record))
        return found

    def records(self) -> Iterator[dict[str, Any]]:
        cursor = self.db.conn.execute("select * from charges order by charged_at, id")
        names = [description[0] for description in cursor.description]
        for values in cursor:
            yield dict(zip(names, values, strict=True))

    def charges_since(self, columns: Sequence[str], since: str = "") -> Iterator[dict[str, Any]]:
        """``columns`` of every charge made on or after ``since`` (an ISO date; "" for all)."""
        unknown = set(columns) - {"id", *COLUMN_NAMES}
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
