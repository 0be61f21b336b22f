"""Folding another store of the same run (a shard's, of any layout) into this one."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from relaybatch.engine.states import CANCELLED, FAILED, PENDING, SETTLED_STATES, SUPERSEDED
from relaybatch.engine.store.migrations import source_text_columns
from relaybatch.engine.store.planning import Planning
from relaybatch.engine.store.runs import RunRecord
from relaybatch.engine.store.schema import HANDOFF_COLUMNS
from relaybatch.engine.store.values import now_ms, now_text
from relaybatch.sqlite_batches import transaction

# When a fold (``absorb``) takes another store's row of an item over ours: ours is pending or failed
# and theirs has gone further, anything but pending; a failed row of theirs only when it has sent
# more requests than ours (``attempts`` counts every request sent, so more is newer) or ours never
# sent one. A failure taken once is then ours: folding it again every run would take it again and
# again, and each fold that takes rows makes the next plan a whole one.
# A row superseded here gives way to another store's row of the item that is done or paid for
# there: a partition whose range moved supersedes an item that the partition now holding it has
# taken over (done), and the fold must keep the done one.
_SETTLED = ", ".join(repr(state) for state in sorted(SETTLED_STATES))
# The rows a store hands off (``handoff_page``): settled or superseded here, which another store
# takes over; failed or cancelled here, which reports count (what items that did not succeed cost).
_HANDED_OFF = ", ".join(repr(state) for state in sorted(SETTLED_STATES | {SUPERSEDED, FAILED, CANCELLED}))
_FURTHER_SQL = (
    f"(items.state in ('{PENDING}', '{FAILED}') and excluded.state != '{PENDING}' "
    f"and (excluded.state != '{FAILED}' or coalesce(excluded.attempts, 0) > coalesce(items.attempts, 0) "
    f"or items.state = '{PENDING}' and coalesce(items.attempts, 0) = 0)) "
    f"or (items.state = '{SUPERSEDED}' and excluded.state in ({_SETTLED}))"
)


class Absorbing(Planning, RunRecord):
    """``absorb``: a shard's rows taken where they have gone further."""

    def absorb(self, other: Path, keys: Sequence[str] | None = None, origin: Path | None = None) -> int:
        """Fold another store of the same run (a shard's) into this one; returns the rows taken.
        With ``keys``, only those items' rows (a shard takes items superseded elsewhere that its
        plan then brings back, instead of sending them again).

        Not a move of the state machine: the other store's record of an item replaces this
        store's copy only when this one is missing, pending or failed and the other has gone
        further (``_FURTHER_SQL``). Events stay in the other store (reports read both). Folding the
        same stores again takes nothing (0): a row taken once is then this store's own. ``origin``:
        the store that ``other`` is a scratch copy of (run/handoff.py), which the fold's event names."""
        self.db.execute("attach database ? as other", [str(other)])
        try:
            theirs = {
                row[1]: str(row[2]).lower() for row in self.db.execute("pragma other.table_info(items)")
            }
            with transaction(self.db.conn):
                values = self._absorbed_values(theirs)
                names = ", ".join(values)
                updates = ", ".join(f"{name} = excluded.{name}" for name in values if name != "key")
                cursor = self.db.conn.execute(
                    f"insert into items ({names}) select {', '.join(values.values())} "
                    "from other.items as x where "
                    + ("x.key in (select value from json_each(?)) " if keys is not None else "true ")
                    + f"on conflict(key) do update set {updates} where {_FURTHER_SQL}",
                    [json.dumps(list(keys))] if keys is not None else [],
                )
                taken = int(cursor.rowcount)
                if taken:
                    self._forget_plan()  # rows a shard planned, perhaps from another manifest version
                    # A run event: rows changed without events of their own (change_mark moves).
                    self.db.execute(
                        "insert into events (item, state, detail, at) values (null, 'absorbed', ?, ?)",
                        [json.dumps({"store": str(origin or other), "rows": taken}), now_ms()],
                    )
                if self.manifest() is None:
                    row = self.db.execute(
                        "select name, settings, manifest_path, manifest_sha256 from other.runs limit 1"
                    ).fetchone()
                    if row:
                        self.db.execute(
                            "insert or ignore into runs (name, created_at, updated_at) values (?, ?, ?)",
                            [row[0], now_text(), now_text()],
                        )
                        self.db.execute(
                            "update runs set settings = coalesce(settings, ?), manifest_path = ?, "
                            "manifest_sha256 = ?",
                            [row[1], row[2], row[3]],
                        )
        finally:
            self.db.execute("detach database other")
        return taken

    def _absorbed_values(self, theirs: dict[str, str]) -> dict[str, str]:
        """Each column of ours the attached store ``other`` has, as SQL over its items (``x``), in
        this store's layout: its data files' ids become ours; a store of layout 0 or 1 (source
        as "path:line" text, ISO times) is converted as its migration would. A store of layout 0
        has two more columns (created_at, updated_at), not taken. ``theirs``: its columns' types."""
        values = {name: f"x.{name}" for name in self.db.table("items").columns_dict if name in theirs}
        if theirs.get("job") == "integer":  # layout 3: its jobs' ids become ours
            self.db.execute("insert or ignore into main.jobs (name) select name from other.jobs order by id")
            values["job"] = (
                "(select m.id from main.jobs m join other.jobs o on o.name = m.name where o.id = x.job)"
            )
        else:
            self.db.execute(
                "insert or ignore into main.jobs (name) select x.job from other.items as x group by 1"
            )
            values["job"] = "(select id from main.jobs where name = x.job)"
        if "source_file" in theirs:
            self.db.execute(
                "insert or ignore into main.source_files (path) select path from other.source_files"
            )
            values["source_file"] = (
                "(select s.id from main.source_files s join other.source_files o on o.path = s.path "
                "where o.id = x.source_file)"
            )
        elif "source" in theirs:
            values.update(source_text_columns(self.db, "other.items as x", "x", "main", values))
        return values

    def handoff_page(self, after_rowid: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows after ``after_rowid`` that another store of the run may take over
        (settled or superseded here) or that did not succeed here (failed, cancelled: reports
        count them), each as (rowid, *HANDOFF_COLUMNS): what the store's owner
        writes to its handoff file (relaybatch/run/handoff.py). A store of the current layout
        (its owner opened it for writing)."""
        columns = [
            {
                "job": "(select name from jobs where id = items.job)",
                "source_path": "(select path from source_files where id = items.source_file)",
            }.get(name, name)
            for name in HANDOFF_COLUMNS
        ]
        sql = (
            f"select rowid, {', '.join(columns)} from items where state in ({_HANDED_OFF}) "
            "and rowid > ? order by rowid limit ?"
        )
        return [tuple(row) for row in self.db.execute(sql, [after_rowid, limit])]

    def load_handoff(self, rows: Iterable[Sequence[Any]]) -> int:
        """Add ``rows`` (HANDOFF_COLUMNS each, from another store's handoff file) to this store, a
        scratch copy of that store's work that ``absorb`` then folds like the store itself; rows
        added. The copy lives on the host that reads it: no other host's SQLite is opened."""
        names = [name for name in HANDOFF_COLUMNS if name not in ("job", "source_path")]
        sql = (
            f"insert or replace into items ({', '.join(names)}, job, source_file) values "
            f"({', '.join('?' for _ in names)}, (select id from jobs where name = ?), "
            "(select id from source_files where path = ?))"
        )
        job_at, path_at = HANDOFF_COLUMNS.index("job"), HANDOFF_COLUMNS.index("source_path")
        kept = [i for i, name in enumerate(HANDOFF_COLUMNS) if name not in ("job", "source_path")]
        added = 0
        with transaction(self.db.conn):
            for row in rows:
                self.db.execute("insert or ignore into jobs (name) values (?)", [row[job_at]])
                if row[path_at] is not None:
                    self.db.execute("insert or ignore into source_files (path) values (?)", [row[path_at]])
                self.db.execute(sql, [*(row[i] for i in kept), row[job_at], row[path_at]])
                added += 1
        return added
