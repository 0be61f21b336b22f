"""Planning: making the store hold exactly the current manifest's items (new ones added, those it
no longer produces superseded, those it produces again restored), and the plan's fingerprint
(what it means: relaybatch/run/fingerprint.py) kept in the same transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

from relaybatch.engine.states import DONE, PENDING, SUPERSEDABLE_STATES, SUPERSEDED
from relaybatch.engine.store import schema
from relaybatch.engine.store.records import Change, PlanCounts, PlanRecord
from relaybatch.engine.store.schema import RENAMED
from relaybatch.engine.store.values import chunks, compact_json, now_ms, split_source
from relaybatch.engine.store.writes import CheckedWrites
from relaybatch.manifests import Item
from relaybatch.sqlite_batches import json_array, json_columns, transaction


class Planning(CheckedWrites):
    """Items in, and the plan's record."""

    def add_items(self, items: Iterable[Item]) -> int:
        """Insert items not seen before; items already in the store keep their state.

        All of them in one transaction (a crash leaves none), sent in chunks of rows as JSON
        arrays: one ``insert ... select from json_each(?)`` per chunk instead of one statement per
        item (see ``apply``)."""
        with transaction(self.db.conn):
            self._forget_plan()
            return sum(self._insert_chunk(chunk) for chunk in chunks(items, schema.ADD_CHUNK_ROWS))

    def plan_items(
        self,
        items: Iterable[Item],
        skip: Callable[[Sequence[str]], set[str]] | None = None,
        record: Callable[[], PlanRecord | None] | None = None,
    ) -> PlanCounts:
        """Make the store hold exactly ``items``, the current manifest's: new ones are added as
        pending; items the manifest no longer produces become ``superseded`` (kept, never exported;
        items in flight are left to finish first); superseded items it produces again come back
        (``done`` when they have a result, else ``pending``). One transaction; memory stays flat
        (the current keys go to a temporary table, not a Python set). ``skip`` names, per chunk of
        keys, items that belong to the manifest but must not be added here (a shard skips what
        another store of the run has settled).

        ``record``, called once the items are in, gives the plan's fingerprint, kept in the same
        transaction; when it is not ``complete``, ``items`` are only the rows appended to the
        planned manifest and nothing is superseded. Without one (no ``record``, or it gives None),
        a recorded fingerprint is forgotten (these items are not what it describes)."""
        attached: list[str] = []
        try:
            with transaction(self.db.conn):
                added = self._add_current(items, skip)
                self._name_anew()
                fingerprint = record() if record is not None else None
                if fingerprint is None:
                    self._forget_plan()
                else:
                    attached = self._write_plan_record(fingerprint)
                stamp = now_ms()
                superseded = 0
                if fingerprint is None or fingerprint.complete:
                    superseded = self._move_matching(
                        f"state in ({', '.join(repr(state) for state in sorted(SUPERSEDABLE_STATES))}) "
                        "and key not in (select key from current_keys)",
                        lambda _: Change("", SUPERSEDED, {}, "the manifest no longer produces this item"),
                        stamp,
                    )
                restored = self._move_matching(
                    f"state = '{SUPERSEDED}' and key in (select key from current_keys)",
                    lambda has_result: Change(
                        "", DONE if has_result else PENDING, {}, "the manifest produces this item again"
                    ),
                    stamp,
                )
                self.db.execute("delete from current_keys")
        finally:
            for name in attached:
                self.db.execute(f"detach database {name}")
        return PlanCounts(added, superseded, restored)

    def _add_current(self, items: Iterable[Item], skip: Callable[[Sequence[str]], set[str]] | None) -> int:
        """Inside the plan's transaction: ``items`` not in the store added (but those ``skip``
        names), and every key of them in the temporary table ``current_keys`` with its id, carried
        values and source; returns how many were added."""
        self.db.execute(
            "create temp table if not exists current_keys "
            "(key text primary key, item_id text, carry text, source_file integer, "
            "source_line integer)"
        )
        self.db.execute("delete from current_keys")
        added = 0
        for chunk in chunks(items, schema.ADD_CHUNK_ROWS):
            skipped = skip([item.key for item in chunk]) if skip else set()
            sources = self._sources(item.source for item in chunk)
            added += self._insert_chunk([item for item in chunk if item.key not in skipped], sources)
            self.db.conn.executemany(
                "insert or ignore into current_keys (key, item_id, carry, source_file, source_line) "
                "values (?, ?, ?, ?, ?)",
                [[item.key, item.item_id, compact_json(item.carry), *sources[item.source]] for item in chunk],
            )
        return added

    def _write_plan_record(self, record: PlanRecord) -> list[str]:
        """Inside the plan's transaction; returns the databases attached (detached after it: SQLite
        refuses to detach inside a transaction). The duplicate finders' rows are copied in one
        statement each from their files attached (``KeptRows.select_sql``)."""
        if record.complete:
            self.db.execute("delete from plan_inputs")
            self.db.execute("delete from plan_rows")
        self.db.conn.executemany(
            "insert or replace into plan_inputs (path, role, size, sha256, detail) values (?, ?, ?, ?, ?)",
            record.inputs,
        )
        attached = []
        for index, (kind, rows) in enumerate(record.seen):
            name = f"seen{index}"
            self.db.execute(f"attach database ? as {name}", [str(rows.path)])
            attached.append(name)
            self.db.execute(
                "insert or replace into plan_rows (kind, digest, job, line) "
                f"select ?, digest, job, line from ({rows.select_sql(name)})",
                [kind],
            )
        self._update_run({"plan_summary": json.dumps(record.summary, sort_keys=True)}, in_transaction=True)
        return attached

    def _forget_plan(self) -> None:
        """Inside a transaction that writes items outside a recorded plan: the next plan is whole."""
        if self.db.execute("select plan_summary from runs where plan_summary is not null").fetchone():
            self.db.execute("update runs set plan_summary = null")
            self.db.execute("delete from plan_inputs")
            self.db.execute("delete from plan_rows")

    def plan_summary(self) -> dict[str, Any] | None:
        """What the last recorded plan learnt (None: no plan recorded, or a store from before)."""
        try:
            row = self.db.execute("select plan_summary from runs order by rowid limit 1").fetchone()
        except sqlite3.OperationalError:  # a read-only view of a store from before the column
            return None
        return json.loads(row[0]) if row and row[0] else None

    def plan_inputs(self) -> Iterator[tuple[str, str, int, str, dict[str, Any]]]:
        """(path, role, size, sha256, detail) of every file the recorded plan read."""
        for path, role, size, sha256, detail in self.db.execute(
            "select path, role, size, sha256, detail from plan_inputs order by path"
        ):
            yield path, role, size, sha256, json.loads(detail) if detail else {}

    def planned_rows(self, kind: int, digests: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Of ``digests`` (PLANNED_KEY or PLANNED_ID), those the recorded plan holds: (job, line)."""
        sql = (
            "select digest, job, line from plan_rows "
            "where kind = ? and digest in (select value from json_each(?))"
        )
        rows = self.db.execute(sql, [kind, json.dumps(digests)])
        return {digest: (job, line) for digest, job, line in rows}

    def _name_anew(self) -> None:
        """Inside the plan's transaction: items the manifest still produces (same job, kind and
        request, so the same key) under another id, carried values or line take the current ones,
        as a fresh plan gives them; an id or carried value that changed gets a 'renamed' event, no
        state (the next export shows it, so the store's change mark must move; the report and the
        dashboard count item states only)."""
        # The rows to change are found from the current keys (a join through the items' key index)
        # and updated by rowid: an `update ... from` alone scans every item, which made planning
        # 2,000 appended rows into a million-item store cost about a second.
        renamed = self.db.execute(
            "update items set item_id = c.item_id, carry = c.carry from current_keys as c "
            "where items.key = c.key and items.rowid in (select i.rowid from current_keys k "
            "join items i on i.key = k.key "
            # json(): the same values whatever the spacing of the stored text (a store of an older layout)
            "where i.item_id is not k.item_id or json(i.carry) is not json(k.carry)) "
            "returning items.key"
        ).fetchall()
        self.db.execute(
            "update items set source_file = c.source_file, source_line = c.source_line "
            "from current_keys as c where items.key = c.key and items.rowid in (select i.rowid "
            "from current_keys k join items i on i.key = k.key "
            "where i.source_file is not k.source_file or i.source_line is not k.source_line)"
        )
        if renamed:
            detail = "the manifest names this item anew (its id or carried values changed)"
            self._insert_events([Change(key, RENAMED, {}, detail) for (key,) in renamed], now_ms())

    def _insert_chunk(
        self, chunk: Sequence[Item], sources: dict[str | None, tuple[int | None, int | None]] | None = None
    ) -> int:
        """``sources``: ``_sources`` of the chunk's items when the caller has them already."""
        if not chunk:
            return 0
        if sources is None:
            sources = self._sources(item.source for item in chunk)
        jobs = self._named_ids("jobs", "name", {item.job for item in chunk})
        rows = [
            [
                item.key,
                item.item_id,
                jobs[item.job],
                item.kind,
                compact_json(item.request),
                compact_json(item.carry),
                *sources[item.source],
            ]
            for item in chunk
        ]
        array = json_array(rows)
        if array is None:
            cursor = self.db.conn.executemany(
                "insert or ignore into items (key, item_id, job, kind, request, carry, source_file, "
                "source_line, state, attempts) values (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                [[*row, PENDING] for row in rows],
            )
        else:
            cursor = self.db.conn.execute(
                "insert or ignore into items (key, item_id, job, kind, request, carry, source_file, "
                f"source_line, state, attempts) select {json_columns(8)}, ?, 0 "
                "from json_each(?) as j order by j.key",
                [PENDING, array],
            )
        return int(cursor.rowcount)

    def _sources(self, sources: Iterable[str | None]) -> dict[str | None, tuple[int | None, int | None]]:
        """Each distinct source text as (file id, line), the data files added to ``source_files``
        when new; inside the caller's transaction. A chunk's items come from a file or two."""
        split = {source: split_source(source) for source in set(sources)}
        ids = self._named_ids(
            "source_files", "path", {path for path, _ in split.values() if path is not None}
        )
        return {source: (None if path is None else ids[path], line) for source, (path, line) in split.items()}

    def _named_ids(self, table: str, column: str, names: Collection[str]) -> dict[str, int]:
        """The ids of ``names`` in ``table`` (``jobs`` or ``source_files``), those not there yet
        added; inside the caller's transaction."""
        ordered = sorted(names)
        self.db.conn.executemany(
            f"insert or ignore into {table} ({column}) values (?)", [[name] for name in ordered]
        )
        rows = self.db.execute(
            f"select {column}, id from {table} where {column} in (select value from json_each(?))",
            [json.dumps(ordered)],
        )
        return dict(rows.fetchall())
