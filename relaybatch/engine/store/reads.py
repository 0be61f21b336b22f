"""Reads of the checkpoint: pages of work for the engine, items and events for exports and views,
counts for status and progress. Each works on every layout a read-only store may have."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from relaybatch.engine.states import ALL_STATES, DONE, FAILED, PENDING, RETRY_SEND, SETTLED_STATES, SUPERSEDED
from relaybatch.engine.store.base import StoreBase
from relaybatch.engine.store.schema import EVENT_AT_SQL, WORK_COLUMNS
from relaybatch.engine.store.values import Row, decoded

# The column that orders ``iter_items``'s merged streams (a name no item column has).
_ORDER = "rowid_order_"


class Reads(StoreBase):
    """Everything read from items and events."""

    def change_mark(self) -> str:
        """Text that changes whenever what an export reads may have changed, found by index probes:
        every state change writes an item event, every new item a higher rowid, a fold of another
        store an 'absorbed' run event; the run's creation time tells a store made afresh apart."""
        created = self.db.execute("select min(created_at) from runs").fetchone()[0]
        # The last event that can change an item (run events such as the limiter's do not), read
        # backwards from the end: run events come in few at a time.
        item_event = "item is not null" if self._events_by_rowid else "key != ''"  # layout 0, read-only
        event = self.db.execute(
            f"select id from events where {item_event} or state = 'absorbed' order by id desc limit 1"
        ).fetchone()
        item = self.db.execute("select max(rowid) from items").fetchone()[0]
        return f"{created}/{event[0] if event else 0}/{item or 0}"

    def settled_keys(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` whose work is done, paid for or possibly paid for here (done, in
        flight, uncertain): another store of the same run must never send them."""
        sql = (
            "select key from items where key in (select value from json_each(?)) "
            f"and state in ({', '.join(repr(state) for state in sorted(SETTLED_STATES))})"
        )
        return {row[0] for row in self.db.execute(sql, [json.dumps(list(keys))])}

    def done_answers(self, keys: Sequence[str]) -> dict[str, tuple[str, dict[str, Any] | None, str | None]]:
        """Those of ``keys`` done here, each with its item id, answer and remote id: what another
        run may reuse instead of sending the same request (run/reuse.py)."""
        sql = (
            "select key, item_id, result, remote_id from items "
            "where key in (select value from json_each(?)) and state = ?"
        )
        return {
            key: (item_id, decoded({"result": result})["result"], remote_id)
            for key, item_id, result, remote_id in self.db.execute(sql, [json.dumps(list(keys)), DONE])
        }

    def keys_with_work(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` settled here (``settled_keys``) or superseded here: a partition takes
        these rows over instead of sending the items again (relaybatch/run/partitions.py)."""
        states = sorted(SETTLED_STATES | {SUPERSEDED})
        sql = (
            "select key from items where key in (select value from json_each(?)) "
            f"and state in ({', '.join(repr(state) for state in states)})"
        )
        return {row[0] for row in self.db.execute(sql, [json.dumps(list(keys))])}

    def keys_in_state(self, *states: str) -> list[str]:
        marks = ",".join("?" for _ in states)
        sql = f"select key from items where state in ({marks}) order by rowid"
        return [row[0] for row in self.db.execute(sql, states).fetchall()]

    def work_page(
        self,
        state: str,
        after_rowid: int,
        limit: int,
        ready_at: float | None = None,
        skip_jobs: Collection[str] = (),
    ) -> list[Row]:
        """Up to ``limit`` items in ``state`` after ``after_rowid``; with ``ready_at``, only those
        whose not-before time has passed; none of ``skip_jobs`` (held by their budget). Paging
        keeps memory flat on million-item runs."""
        sql = f"select {self._selected(WORK_COLUMNS)} from items where state = ? and rowid > ?"
        args: list[Any] = [state, after_rowid]
        if ready_at is not None:
            sql += " and (not_before is null or not_before <= ?)"
            args.append(ready_at)
        if skip_jobs:
            sql += f" and {self._job_not_in(len(skip_jobs))}"
            args.extend(skip_jobs)
        sql += " order by rowid limit ?"
        args.append(limit)
        return [Row.from_tuple(row) for row in self.db.execute(sql, args).fetchall()]

    def has_state(self, state: str, skip_jobs: Collection[str] = ()) -> bool:
        """Whether any item is in ``state``, outside ``skip_jobs`` (one index probe without them;
        the feeder asks this often)."""
        sql, args = "select 1 from items where state = ?", [state, *skip_jobs]
        if skip_jobs:
            sql += f" and {self._job_not_in(len(skip_jobs))}"
        return self.db.execute(sql + " limit 1", args).fetchone() is not None

    def done_page(
        self, kinds: Collection[str], after_rowid: int, limit: int
    ) -> list[tuple[int, str, str, str | None, dict[str, Any] | None, str | None]]:
        """Up to ``limit`` done items of ``kinds`` after ``after_rowid``, in rowid order:
        (rowid, key, kind, remote_id, result, last_error)."""
        marks = ",".join("?" for _ in kinds)
        sql = (
            f"select rowid, key, kind, remote_id, result, last_error from items "
            f"where state = ? and kind in ({marks}) and rowid > ? order by rowid limit ?"
        )
        rows = self.db.execute(sql, [DONE, *kinds, after_rowid, limit]).fetchall()
        return [
            (rowid, key, kind, remote, decoded({"result": result})["result"], note)
            for rowid, key, kind, remote, result, note in rows
        ]

    def retryable_failures(self, retry: int = RETRY_SEND) -> list[str]:
        """Keys of failed items another try could fix: ``RETRY_SEND`` (attempts ran out on a
        retryable error) or ``RETRY_POLL`` (paid remote work whose polls kept failing)."""
        sql = "select key from items where state = ? and retryable = ? order by rowid"
        return [row[0] for row in self.db.execute(sql, [FAILED, retry])]

    def earliest_not_before(self, state: str = PENDING) -> float | None:
        row = self.db.execute("select min(not_before) from items where state = ?", [state]).fetchone()
        return row[0] if row else None

    def item(self, key: str) -> dict[str, Any]:
        """Every column of one item, as ``iter_items`` reads them; KeyError when there is none."""
        cursor = self.db.conn.execute(f"select {self._selected(None)} from items where key = ?", [key])
        names = [description[0] for description in cursor.description]
        row = cursor.fetchone()
        if row is None:
            raise KeyError(key)
        return decoded(dict(zip(names, row, strict=True)))

    def iter_items(
        self,
        job: str | None = None,
        states: Sequence[str] = (),
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Items in rowid order as dicts, JSON columns decoded; ``columns`` limits what is read
        (an export of a million items has no use for each request's text).

        Read without sorting, so memory stays flat however many items match: the indexes hold
        each (job, state)'s items in rowid order, and SQLite merges those ordered streams (one
        ``union all`` arm per state). ``state in (...)`` with ``order by rowid`` would sort every
        matching row, text and all, in memory up to the page cache's size (32 MB) and in
        temporary files beyond it: the export's memory then grew with the run (benchmarks/RESULTS.md,
        issue 19 target 2)."""
        selected = self._selected(columns)
        job_clause, job_args = (f"{self._job_is()} and ", [job]) if job else ("", [])
        if states:
            arm = f"select rowid as {_ORDER}, {selected} from items where {job_clause}state = ?"
            sql = " union all ".join(arm for _ in states)
            args: list[Any] = [value for state in states for value in (*job_args, state)]
        else:
            where = f" where {self._job_is()}" if job else ""
            sql, args = f"select rowid as {_ORDER}, {selected} from items{where}", job_args
        sql += f" order by {_ORDER}"
        if limit is not None:
            sql += " limit ?"
            args.append(limit)
        cursor = self.db.conn.execute(sql, args)
        names = [description[0] for description in cursor.description][1:]
        for _, *values in cursor:
            yield decoded(dict(zip(names, values, strict=True)))

    def export_profile(self, job: str) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        """Each item of ``job``: its kind, its carried input columns, and its request when the
        results schema depends on it (judgment questions, the web search route); other requests,
        the bulk of the store, are not read."""
        sql = (
            "select kind, carry, case when kind in ('judgment', 'web_search') then request end "
            f"from items where {self._job_is()} and state != ?"
        )
        for kind, carry_text, request_text in self.db.execute(sql, [job, SUPERSEDED]):
            yield kind, json.loads(carry_text or "{}"), json.loads(request_text) if request_text else None

    def current_item_ids(self, job: str, item_ids: Collection[str]) -> set[str]:
        """Which of ``item_ids`` the current manifest still produces in ``job`` (with another
        request: an edited row's old item is superseded, its new one is not)."""
        sql = (
            f"select item_id from items where {self._job_is()} and state != ? "
            "and item_id in (select value from json_each(?))"
        )
        return {row[0] for row in self.db.execute(sql, [job, SUPERSEDED, json.dumps(sorted(item_ids))])}

    def count_by_state(self) -> dict[str, int]:
        sql = "select state, count(*) from items group by state"
        return {state: count for state, count in self.db.execute(sql).fetchall()}

    def count_by_job_and_state(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        # Counted through the (job, state) index, then named.
        for job, state, count in self.db.execute(
            f"select {self._job_name_sql('c')}, state, n from "
            "(select job, state, count(*) as n from items group by job, state) as c order by 1, 2"
        ):
            counts.setdefault(job, {})[state] = count
        return counts

    def count_by_kind_and_state(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for kind, state, count in self.db.execute("select kind, state, count(*) from items group by 1, 2"):
            counts.setdefault(kind, {})[state] = count
        return counts

    def done_with_note(self, note: str, limit: int | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Done items whose ``last_error`` starts with ``note``: how many, and the first ``limit``
        of them (job, item_id, last_error) in rowid order."""
        where = "where state = ? and substr(last_error, 1, ?) = ?"
        args: list[Any] = [DONE, len(note), note]
        total = self.db.execute(f"select count(*) from items {where}", args).fetchone()[0]
        sql = f"select {self._column_sql('job')}, item_id, last_error from items {where} order by rowid"
        if limit is not None:
            sql += " limit ?"
            args.append(limit)
        rows = [
            {"job": job, "item_id": item_id, "last_error": error}
            for job, item_id, error in self.db.execute(sql, args)
        ]
        return int(total), rows

    def unsuccessful_items(self) -> Iterator[tuple[str, str, str]]:
        """(key, state, reason) of every failed, uncertain and cancelled item, through the state
        index: what the report counts as money spent on items that did not succeed."""
        sql = (
            "select key, state, coalesce(last_error, 'no reason recorded') from items "
            "where state in ('failed', 'uncertain', 'cancelled')"
        )
        yield from self.db.execute(sql)

    def failure_reasons(self) -> list[tuple[str, str, int, str]]:
        """(state, reason, items, one item key) for failed and uncertain items, grouped by reason."""
        sql = (
            "select state, coalesce(last_error, 'no reason recorded'), count(*), min(key) from items "
            "where state in ('failed', 'uncertain') group by 1, 2"
        )
        return [(state, reason, count, key) for state, reason, count, key in self.db.execute(sql)]

    def calls(self, states: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """Every distinct (job, kind, model) in the store (of items in ``states`` when given, read
        through the state index); model is '' for routes without one."""
        sql = "select distinct job, kind, coalesce(json_extract(request, '$.model'), '') as model from items"
        if states:
            sql += f" where state in ({', '.join('?' for _ in states)})"
        sql = f"select {self._job_name_sql('c')}, kind, model from ({sql}) as c"
        return [(job, kind, model) for job, kind, model in self.db.execute(sql, list(states))]

    def iter_events(self) -> Iterator[dict[str, Any]]:
        """Every event in order, with its item's key and kind, streamed; ``at`` as ISO text."""
        if self._events_by_rowid:
            sql = (
                "select coalesce(i.key, '') as key, e.state, e.detail, "
                f"{EVENT_AT_SQL.format('e.at')} as at, i.kind "
                "from events e left join items i on i.rowid = e.item order by e.id"
            )
        else:  # layout 0, opened read-only
            sql = (
                "select e.key, e.state, e.detail, e.at, i.kind from events e "
                "left join items i on i.key = e.key order by e.id"
            )
        cursor = self.db.conn.execute(sql)
        names = [description[0] for description in cursor.description]
        for values in cursor:
            yield dict(zip(names, values, strict=True))

    def jobs(self) -> list[str]:
        """Jobs of the current manifest: those with at least one item that is not superseded."""
        sql = "select distinct job from items where state != ?"
        if self._job_ids:
            sql = f"select name from jobs where id in ({sql})"
        sql += " order by 1"
        return [row[0] for row in self.db.execute(sql, [SUPERSEDED])]

    def iter_current_items(self, job: str, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """The items of ``job`` the current manifest produces (all but superseded), in rowid order."""
        return self.iter_items(job, [state for state in ALL_STATES if state != SUPERSEDED], columns)

    def events(self, key: str) -> list[dict[str, Any]]:
        """One item's events in order: id, key, state, detail and ``at`` (ISO text)."""
        if self._events_by_rowid:
            sql = (
                f"select e.id, ? as key, e.state, e.detail, {EVENT_AT_SQL.format('e.at')} as at "
                "from events e where e.item = (select rowid from items where key = ?) order by e.id"
            )
            args = [key, key]
        else:  # layout 0, opened read-only
            sql, args = "select id, key, state, detail, at from events where key = ? order by id", [key]
        cursor = self.db.conn.execute(sql, args)
        names = [description[0] for description in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor]
