"""The store's connection: opened for writing (created or migrated) or read-only beside a writer,
and the SQL that reads an item's columns the same way whatever the store's layout."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from relaybatch.engine.store import schema
from relaybatch.engine.store.migrations import create_or_migrate
from relaybatch.engine.store.schema import (
    ITEM_COLUMNS,
    JOB_SQL,
    SCHEMA_VERSION,
    SOURCE_SQL,
)
from relaybatch.engine.store.values import now_text
from relaybatch.lean_imports import import_sqlite_utils
from relaybatch.sqlite_batches import copy_database, transaction

if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = import_sqlite_utils()  # without pandas (lean_imports.py)


class StoreBase:
    """One SQLite connection to a checkpoint file; the mixins of checkpoint.py add what it does."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        if read_only:
            # A reader beside a running engine (progress, reports): WAL lets it read while the
            # engine writes, and mode=ro means it can never take a write lock or create a file.
            connection = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            connection.execute("PRAGMA busy_timeout=10000")
            self.db = sqlite_utils.Database(connection)
            self._read_old_layout_as_it_is()
            self._events_by_rowid = "item" in self.db.table("events").columns_dict
            # Layout 2's items (source file ids, times in milliseconds) and layout 3's (job ids);
            # older ones read as they are.
            item_columns = self.db.table("items").columns_dict
            self._compact_items = "source_file" in item_columns
            self._job_ids = item_columns.get("job") is int
            self._executions = "executions" in self.db.table_names()
            self.execution: int | None = None
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # Before anything is written (a store that exists keeps its own until a migration: _vacuum).
        connection.execute(f"PRAGMA page_size={schema.PAGE_SIZE}")
        connection.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a process crash (our failure model); only an OS
        # crash or power loss can drop the last transactions, and never corrupts the file.
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=10000")
        # A bounded page cache (CACHE_KIB); checkpointing the WAL every ~16 MB instead of every
        # 4 MB halves the time commits spend copying pages.
        connection.execute(f"PRAGMA cache_size=-{schema.CACHE_KIB}")
        connection.execute("PRAGMA wal_autocheckpoint=4000")
        self.db = sqlite_utils.Database(connection)
        create_or_migrate(self.db, path)
        self._events_by_rowid = True
        self._compact_items = True
        self._job_ids = True
        self._executions = True
        # The execution this object began (executions.py, ``record_start``) and has not ended:
        # every item it changes is stamped with it (writes.py).
        self.execution = None

    def _read_old_layout_as_it_is(self) -> None:
        """A reader of an older layout keeps one read transaction until it closes: the store as it
        was when opened, whatever another process migrates meanwhile. Its queries are chosen by the
        layout seen at open, so between two of them a migration committed by a writer would turn
        them into "no such column" errors, or job ids shown as names. A WAL snapshot costs the
        writer nothing (it migrates and commits beside it); readers of the current layout, which
        no migration changes, read each statement afresh as before, and so does a reader of a store
        not in WAL mode (relaybatch never made one), where the snapshot would lock the writer out."""
        self.db.execute("BEGIN")
        self.db.execute("select count(*) from sqlite_schema").fetchone()  # the snapshot starts here
        wal = self.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        if self.layout() >= SCHEMA_VERSION or not wal:
            self.db.execute("COMMIT")

    def release_cache(self) -> None:
        """Give back the page cache's memory (the connection stays open; pages are read again if
        needed): what follows an execution (the ledger Parquet) does not read this store, and its
        peak would otherwise sit on top of a full cache (CACHE_KIB)."""
        self.db.execute("PRAGMA shrink_memory")

    @contextlib.contextmanager
    def scanning(self) -> Iterator[None]:
        """A small page cache while whole tables are read once (an export): each page is used
        once, so a big cache would only fill with pages never read again, and memory would grow
        with the run up to the cache's size. Pages beyond it are freed at once; restored after."""
        previous = self.db.execute("PRAGMA cache_size").fetchone()[0]
        self.db.execute(f"PRAGMA cache_size=-{schema.SCAN_CACHE_KIB}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size={int(previous)}")

    @classmethod
    def open_read_only(cls, path: Path) -> Self:
        return cls(path, read_only=True)

    def copy_to(self, path: Path) -> None:
        """The whole store as it is now, copied to ``path`` (SQLite's online backup, in one step: a
        consistent copy, read in one short read transaction). An export beside an execution reads
        the copy at leisure instead of holding a read transaction on the live store for the whole
        export, which kept the writer's WAL from being checkpointed and cost the execution about an
        eighth more CPU (benchmarks/RESULTS.md, issue 31)."""
        copy_database(self.db.conn, path)

    def layout(self) -> int:
        """The store's layout (``PRAGMA user_version``); below SCHEMA_VERSION, the first open for
        writing migrates it."""
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _update_run(self, values: dict[str, Any], in_transaction: bool = False, add: bool = False) -> None:
        """Set the run row's ``values`` (``add``: add them to what is there, null counting as 0)."""
        template = "{0} = coalesce({0}, 0) + ?" if add else "{0} = ?"
        assignments = ", ".join(template.format(name) for name in values)
        with contextlib.nullcontext() if in_transaction else transaction(self.db.conn):
            if self.db.execute("select count(*) from runs").fetchone()[0] == 0:
                self.db.execute(
                    "insert into runs (name, created_at, updated_at) values (?, ?, ?)",
                    [self.path.parent.name, now_text(), now_text()],
                )
            self.db.execute(f"update runs set {assignments}, updated_at = ?", [*values.values(), now_text()])

    def _selected(self, columns: Sequence[str] | None) -> str:
        """SQL select list of an item's ``columns`` (all when None) as readers see them: from
        layout 2, ``source`` is rebuilt as "path:line" from the file's id and the line; from layout
        3, ``job`` is the job's name; a store from before executions (read as it is) has no
        ``execution``: null."""
        if not self._compact_items and not self._job_ids and self._executions:
            return ", ".join(columns or ["*"])
        return ", ".join(self._column_sql(name) for name in columns or ITEM_COLUMNS)

    def _column_sql(self, name: str) -> str:
        if name == "execution" and not self._executions:
            return "null as execution"
        if name == "source" and self._compact_items:
            return f"{SOURCE_SQL.format('items')} as source"
        if name == "job" and self._job_ids:
            return f"{JOB_SQL.format('items')} as job"
        return name

    def _job_name_sql(self, table: str) -> str:
        """SQL: the job's name of a row of ``table`` (an alias over items' columns)."""
        return JOB_SQL.format(table) if self._job_ids else f"{table}.job"

    def _job_is(self) -> str:
        """SQL: the item belongs to the job named by the next parameter (one index probe)."""
        return "job = (select id from jobs where name = ?)" if self._job_ids else "job = ?"

    def _job_not_in(self, count: int) -> str:
        """SQL: the item belongs to none of the ``count`` jobs named by the next parameters."""
        marks = ",".join("?" for _ in range(count))
        return (
            f"job not in (select id from jobs where name in ({marks}))"
            if self._job_ids
            else f"job not in ({marks})"
        )
