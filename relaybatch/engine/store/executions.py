"""The run's executions (DESIGN.md invariant 10): each CLI run, flow run or scheduled night is a
row of ``executions`` with its id, what started it, when, what the plans before it added, what it
sent and why it stopped; the items it changes carry its id (writes.py stamps them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from relaybatch.engine.store.base import StoreBase
from relaybatch.engine.store.schema import EXECUTION_FIELDS
from relaybatch.engine.store.values import now_ms, now_text
from relaybatch.sqlite_batches import transaction

_SELECTED = ", ".join(EXECUTION_FIELDS)


def _record(row: Sequence[Any]) -> dict[str, Any]:
    """An execution's row as a dict, its times as ISO text (UTC, seconds)."""
    record = dict(zip(EXECUTION_FIELDS, row, strict=True))
    for name in ("started_at", "ended_at"):
        if record[name] is not None:
            record[name] = datetime.fromtimestamp(record[name] / 1000, UTC).isoformat(timespec="seconds")
    return record


class ExecutionRecords(StoreBase):
    """``executions``, and the run row's record of the last one (runs.py reads it back)."""

    def note_planned(self, added: int) -> None:
        """A plan added ``added`` items: the next execution's ``added`` (plans before it sum up)."""
        if added:
            self._update_run({"planned_new": added}, add=True)

    def record_start(self, entry: str | None = None, label: str | None = None) -> int:
        """An execution begins: until ``record_stop``, a reader sees it running (or dead). Its id.
        An execution this object began and has not ended goes on: the run layer begins it with its
        entry and label (run/assemble.py, ``open_run``), and the engine then finds it begun."""
        if self.execution is not None:
            return self.execution
        with transaction(self.db.conn):
            self._update_run(
                {"execution_started_at": now_text(), "execution_ended_at": None, "stop_reason": None},
                in_transaction=True,
            )
            cursor = self.db.conn.execute(
                "insert into executions (started_at, entry, label, added) "
                "values (?, ?, ?, coalesce((select planned_new from runs order by rowid limit 1), 0))",
                [now_ms(), entry or "api", label],
            )
            self.db.execute("update runs set planned_new = null")
        self.execution = int(cursor.lastrowid or 0)
        return self.execution

    def record_stop(self, reason: str | None, sent: int | None = None) -> None:
        """Remember how the last execution ended: why it stopped early, or None (it finished), and
        how many requests it sent."""
        with transaction(self.db.conn):
            self._update_run({"stop_reason": reason, "execution_ended_at": now_text()}, in_transaction=True)
            if self.execution is not None:
                self.db.execute(
                    "update executions set ended_at = ?, stop_reason = ?, sent = coalesce(?, sent) "
                    "where id = ?",
                    [now_ms(), reason, sent, self.execution],
                )
        self.execution = None

    def executions(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The run's executions, newest first (``limit``: only that many)."""
        if not self._executions:
            return []
        sql = f"select {_SELECTED} from executions order by id desc" + (" limit ?" if limit else "")
        return [_record(row) for row in self.db.execute(sql, [limit] if limit else []).fetchall()]

    def execution_record(self, execution: int) -> dict[str, Any] | None:
        """One execution by id (None: no such execution in this store)."""
        if not self._executions:
            return None
        row = self.db.execute(f"select {_SELECTED} from executions where id = ?", [execution]).fetchone()
        return None if row is None else _record(row)

    def execution_by_label(self, label: str) -> dict[str, Any] | None:
        """The newest execution started under ``label`` (a flow run's name)."""
        if not self._executions:
            return None
        row = self.db.execute(
            f"select {_SELECTED} from executions where label = ? order by id desc limit 1", [label]
        ).fetchone()
        return None if row is None else _record(row)

    def count_by_state_for_execution(self, execution: int) -> dict[str, int]:
        """Items per state whose last change was made by ``execution`` (what it finished)."""
        if not self._executions:
            return {}
        sql = "select state, count(*) from items where execution = ? group by state"
        return {state: count for state, count in self.db.execute(sql, [execution]).fetchall()}
