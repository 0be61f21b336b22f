"""The checkpoint store: SQLite (WAL) is the source of truth for every item's state.

Every state change is one committed write, so a crash at any point leaves a store from which a
resumed run knows exactly what was sent, what answered and what is left.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from relaybatch.manifests import Item

PENDING, SENDING, SUBMITTED, POLLING = "pending", "sending", "submitted", "polling"
DONE, FAILED, CANCELLED, UNCERTAIN = "done", "failed", "cancelled", "uncertain"
TERMINAL_STATES = frozenset({DONE, FAILED, CANCELLED, UNCERTAIN})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class CheckpointStore:
    """Items, their states and results for one run, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=10000")
        self.db = sqlite_utils.Database(connection)
        self._create_tables()

    def _create_tables(self) -> None:
        self.db.table("items").create(
            {
                "key": str,
                "item_id": str,
                "job": str,
                "kind": str,
                "request": str,
                "carry": str,
                "source": str,
                "state": str,
                "attempts": int,
                "remote_id": str,
                "last_error": str,
                "result": str,
                "updated_at": str,
            },
            pk="key",
            not_null={"item_id", "job", "kind", "request", "state"},
            defaults={"attempts": 0},
            if_not_exists=True,
        )
        self.db.table("items").create_index(["state"], if_not_exists=True)
        self.db.table("events").create(
            {"id": int, "key": str, "state": str, "detail": str, "at": str},
            pk="id",
            if_not_exists=True,
        )

    def close(self) -> None:
        self.db.conn.close()

    def add_items(self, items: Iterable[Item]) -> int:
        """Insert items not seen before; items already in the store keep their state."""
        before = self.db.table("items").count
        rows = (
            {
                "key": item.key,
                "item_id": item.item_id,
                "job": item.job,
                "kind": item.kind,
                "request": json.dumps(item.request, sort_keys=True),
                "carry": json.dumps(item.carry, sort_keys=True),
                "source": item.source,
                "state": PENDING,
                "attempts": 0,
                "updated_at": _now(),
            }
            for item in items
        )
        with self.db.conn:
            self.db.table("items").insert_all(rows, ignore=True, batch_size=1000)
        return self.db.table("items").count - before

    def keys_in_state(self, *states: str) -> list[str]:
        marks = ",".join("?" for _ in states)
        sql = f"select key from items where state in ({marks}) order by rowid"
        return [row[0] for row in self.db.execute(sql, states).fetchall()]

    def item(self, key: str) -> dict[str, Any]:
        row = dict(self.db.table("items").get(key))
        row["request"] = json.loads(row["request"])
        row["carry"] = json.loads(row["carry"])
        row["result"] = json.loads(row["result"]) if row["result"] else None
        return row

    def transition(self, key: str, state: str, **fields: Any) -> None:
        """Move one item to a new state and log the event; committed before returning."""
        updates = {"state": state, "updated_at": _now(), **fields}
        if "result" in updates and updates["result"] is not None:
            updates["result"] = json.dumps(updates["result"], sort_keys=True)
        with self.db.conn:
            self.db.table("items").update(key, updates)
            self.db.table("events").insert(
                {
                    "key": key,
                    "state": state,
                    "detail": fields.get("last_error"),
                    "at": updates["updated_at"],
                }
            )

    def count_by_state(self) -> dict[str, int]:
        sql = "select state, count(*) from items group by state"
        return {state: count for state, count in self.db.execute(sql).fetchall()}

    def iter_items(self, job: str | None = None) -> Iterator[dict[str, Any]]:
        where, args = ("job = ?", [job]) if job else (None, [])
        for row in self.db.table("items").rows_where(where, args, order_by="rowid"):
            row["request"] = json.loads(row["request"])
            row["carry"] = json.loads(row["carry"])
            row["result"] = json.loads(row["result"]) if row["result"] else None
            yield row

    def jobs(self) -> list[str]:
        return [row[0] for row in self.db.execute("select distinct job from items order by job")]
