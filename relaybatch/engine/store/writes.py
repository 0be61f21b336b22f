"""The checked write path: every change of an item's state is one update that only touches rows whose
move the state machine allows (engine/states.py), with its event, in one transaction."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from relaybatch.engine.states import (
    FAILED,
    PENDING,
    RETRY_POLL,
    SENDING,
    UNCERTAIN,
    IllegalTransition,
    allowed_pairs,
    is_allowed,
    is_reask,
)
from relaybatch.engine.store import schema
from relaybatch.engine.store.base import StoreBase
from relaybatch.engine.store.records import Change
from relaybatch.engine.store.schema import ITEM_COLUMNS
from relaybatch.engine.store.values import column_value, now_ms
from relaybatch.sqlite_batches import json_array, transaction

# Columns a change may set besides state (what an answer, a retry or a poll writes: those after the
# state); anything else is a programming error, caught early.
_CHANGEABLE = frozenset(ITEM_COLUMNS[ITEM_COLUMNS.index("state") + 1 :])
# The state machine as an SQL list: an update only touches rows whose "old>new" is in it.
_ALLOWED_SQL = "(" + ", ".join(f"'{pair}'" for pair in allowed_pairs()) + ")"


class _Skipped(Exception):
    """An update skipped a row: an illegal move, named once the transaction is rolled back."""


def _segments_with_distinct_keys(changes: Sequence[Change]) -> Iterator[Sequence[Change]]:
    """Consecutive runs of changes in which no key repeats: ``update ... from`` leaves it undefined
    which of two rows for one key wins, so a later change to the same key goes in a later update."""
    start, seen = 0, set[str]()
    for index, change in enumerate(changes):
        if change.key in seen:
            yield changes[start:index]
            start, seen = index, set[str]()
        seen.add(change.key)
    yield changes[start:]


class CheckedWrites(StoreBase):
    """Items' moves through the state machine, and run-level events."""

    def transition(self, key: str, state: str, **fields: Any) -> None:
        """Move one item to a new state and log the event; committed before returning."""
        self.apply([Change(key, state, fields, fields.get("last_error"))])

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply changes in one transaction, each with its event row; committed before returning.

        Groups of several rows travel as one JSON array per statement (``update ... from
        json_each(?)``): for the groups a busy run makes, that costs about half the CPU of one
        statement per change (benchmarks/checkpoint_writes.py). A row or two go one statement each,
        where parsing the array would cost more than it saves.
        """
        if not changes:
            return
        for change in changes:
            unknown = change.fields.keys() - _CHANGEABLE
            if unknown:
                raise ValueError(f"cannot set {sorted(unknown)} on an item")
        stamp = now_ms()
        try:
            with transaction(self.db.conn):
                for segment in _segments_with_distinct_keys(changes):
                    if self._apply_segment(segment):
                        raise _Skipped
                self._insert_events(changes, stamp)
        except _Skipped:
            raise self._illegal(changes) from None  # rolled back: the store is as it was

    def _insert_events(self, changes: Sequence[Change], stamp: int) -> None:
        """One event per change, referring to its item by rowid (looked up by key)."""
        events = [[change.key, change.state, change.detail] for change in changes]
        array = json_array(events)
        if array is None:
            self.db.conn.executemany(
                "insert into events (item, state, detail, at) "
                "values ((select rowid from items where key = ?), ?, ?, ?)",
                [[*event, stamp] for event in events],
            )
        else:
            self.db.conn.execute(
                "insert into events (item, state, detail, at) "
                "select (select rowid from items where key = j.value ->> 0), j.value ->> 1, j.value ->> 2, ? "
                "from json_each(?) as j order by j.key",
                [stamp, array],
            )

    def _apply_segment(self, changes: Sequence[Change]) -> bool:
        """One update per set of changed columns; every key appears once, so order cannot matter.

        Each update only touches rows whose move is in the state machine; True when it skipped
        one (an illegal move or an unknown key): the caller rolls its transaction back."""
        by_columns: dict[tuple[str, ...], list[list[Any]]] = {}
        for change in changes:
            columns = tuple(sorted(change.fields))
            values = [column_value(name, change.fields[name]) for name in columns]
            by_columns.setdefault(columns, []).append([change.key, change.state, *values])
        # The execution that made the change (an int this object holds, never user text).
        stamped = "" if self.execution is None else f", execution = {int(self.execution)}"
        for columns, rows in by_columns.items():
            array = json_array(rows)
            # A re-ask (states.is_reask): sending -> sending with more attempts than the row has.
            attempts = columns.index("attempts") if "attempts" in columns else None
            if array is None:
                updated = self._update_each(columns, rows, stamped, attempts)
            else:
                updated = self._update_from_json(columns, array, stamped, attempts)
            if updated != len(rows):
                return True
        return False

    def _update_each(
        self, columns: tuple[str, ...], rows: list[list[Any]], stamped: str, attempts: int | None
    ) -> int:
        """``rows`` ([key, state, *values of columns]) updated one statement each; rows updated."""
        assignments = "".join(f", {name} = ?" for name in columns) + stamped
        reask = "" if attempts is None else f" or (state = '{SENDING}' and ? = '{SENDING}' and attempts < ?)"
        cursor = self.db.conn.executemany(
            f"update items set state = ?{assignments} "
            f"where key = ? and ((state || '>' || ?) in {_ALLOWED_SQL}{reask})",
            [
                [state, *values, key, state, *([] if attempts is None else [state, values[attempts]])]
                for key, state, *values in rows
            ],
        )
        return cursor.rowcount

    def _update_from_json(
        self, columns: tuple[str, ...], array: str, stamped: str, attempts: int | None
    ) -> int:
        """The rows in the JSON ``array`` updated in one statement (``json_each``); rows updated."""
        assignments = (
            "".join(f", {name} = j.value ->> {index}" for index, name in enumerate(columns, 2)) + stamped
        )
        reask = (
            ""
            if attempts is None
            else f" or (items.state = '{SENDING}' and (j.value ->> 1) = '{SENDING}' "
            f"and items.attempts < (j.value ->> {attempts + 2}))"
        )
        cursor = self.db.conn.execute(
            f"update items set state = j.value ->> 1{assignments} "
            "from json_each(?) as j where items.key = j.value ->> 0 "
            f"and ((items.state || '>' || (j.value ->> 1)) in {_ALLOWED_SQL}{reask})",
            [array],
        )
        return cursor.rowcount

    def _illegal(self, changes: Sequence[Change]) -> IllegalTransition:
        """The first of ``changes`` the state machine forbids, replayed from the store's states
        (the transaction that tried them was rolled back): its key, where it stood, where it went."""
        states: dict[str, tuple[str, int] | None] = {}
        for change in changes:
            if change.key not in states:
                found = self.db.execute(
                    "select state, attempts from items where key = ?", [change.key]
                ).fetchone()
                states[change.key] = None if found is None else (str(found[0]), int(found[1] or 0))
            stood = states[change.key]
            if stood is None:
                return IllegalTransition(change.key, None, change.state)
            old, tries = stood
            moved = is_allowed(old, change.state) or is_reask(
                old, change.state, tries, change.fields.get("attempts")
            )
            if not moved:
                return IllegalTransition(change.key, old, change.state)
            attempts = change.fields.get("attempts")
            states[change.key] = (change.state, attempts if isinstance(attempts, int) else tries)
        return IllegalTransition(changes[0].key, None, changes[0].state)  # not reachable

    def _move_matching(self, where: str, change_for: Any, stamp: int) -> int:
        """Apply ``change_for(has_result)`` to every item matching ``where``, a page at a time,
        through the checked write path; inside the caller's transaction."""
        moved = 0
        while True:
            rows = self.db.execute(
                f"select key, result is not null from items where {where} order by rowid limit ?",
                [schema.ADD_CHUNK_ROWS],
            ).fetchall()
            if not rows:
                return moved
            changes = [
                Change(key, template.state, template.fields, template.detail)
                for key, has_result in rows
                for template in [change_for(bool(has_result))]
            ]
            if self._apply_segment(changes):
                # Not reachable: the items were chosen by their state.
                raise IllegalTransition(changes[0].key, None, changes[0].state)
            self._insert_events(changes, stamp)
            moved += len(changes)

    def settle_uncertain(self, key: str, charged: bool, reason: str) -> str | None:
        """An item that may have been billed, settled from the gateway's bill (`relaybatch resolve`):
        not charged -> ``pending`` (never billed: the next execution sends it); charged -> ``failed``
        with ``reason`` (paid, its answer never recorded: not sent again unless asked). Only an item
        ``uncertain``, or ``sending`` as a dead execution left it; returns its new state, or None
        when it stands elsewhere (resent since, superseded) and was left as it is."""
        row = self.db.execute("select state from items where key = ?", [key]).fetchone()
        if row is None or row[0] not in (UNCERTAIN, SENDING):
            return None
        if charged:
            self.apply([Change(key, FAILED, {"last_error": reason, "retryable": None}, reason)])
            return FAILED
        self.apply([Change(key, PENDING, {"last_error": None, "not_before": None}, reason)])
        return PENDING

    def record_run_event(self, state: str, detail: dict[str, Any]) -> None:
        """A run-level event, not an item's (key ""): e.g. the limiter's limit and 429s so far,
        which the dashboard draws over time."""
        with transaction(self.db.conn):
            self.db.execute(
                "insert into events (item, state, detail, at) values (null, ?, ?, ?)",
                [state, json.dumps(detail), now_ms()],
            )

    def retry_failures(self, reasons: Sequence[str] = (), detail: str = "retried") -> dict[str, int]:
        """Failed items back to ``pending`` (`relaybatch run --retry-failed`), in one transaction
        through the checked write path: every one, or those whose reason contains one of ``reasons``
        (case-insensitive). Never uncertain items (they may have been billed), and never failed
        paid remote work whose polls failed (``RETRY_POLL``: a resume polls it, it is never created
        again). How many items moved, per reason they had failed with."""
        where = f"state = '{FAILED}' and coalesce(retryable, 0) != {RETRY_POLL}"
        args: list[Any] = []
        if reasons:
            where += " and (" + " or ".join("instr(lower(coalesce(last_error, '')), ?) > 0" for _ in reasons)
            where += ")"
            args = [reason.lower() for reason in reasons]
        moved: dict[str, int] = {}
        stamp = now_ms()
        with transaction(self.db.conn):
            while True:
                rows = self.db.execute(
                    f"select key, coalesce(last_error, 'no reason recorded') from items where {where} "
                    "order by rowid limit ?",
                    [*args, schema.ADD_CHUNK_ROWS],
                ).fetchall()
                if not rows:
                    return moved
                fields = {"retryable": None, "not_before": None, "last_error": None}
                changes = [
                    Change(key, PENDING, fields, f"{detail}; it had failed: {why}") for key, why in rows
                ]
                if self._apply_segment(changes):  # not reachable: the items were chosen by their state
                    raise IllegalTransition(changes[0].key, FAILED, PENDING)
                self._insert_events(changes, stamp)
                for _, why in rows:
                    moved[why] = moved.get(why, 0) + 1
