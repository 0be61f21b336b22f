"""The checkpoint store: SQLite (WAL) is the source of truth for every item's state.

Every state change is a committed write, so a crash at any point leaves a store from which a
resumed run knows exactly what was sent, what answered and what is left. Changes can be applied
one at a time (``transition``) or as a group in one transaction (``apply``): the engine groups
the changes that happen in the same moment, and waits for the commit before acting on them.

Tables: ``runs`` (one row per run: its settings and why it last stopped), ``items`` (state,
attempts, remote id, last error, submitted and finished times, not-before time, result, cost
columns that the costs package fills), ``price_snapshots`` (the prices a run used) and ``events``
(append-only log of every transition: the item's rowid, the state, a detail, and the time as
integer milliseconds since the epoch, shown as ISO text by the readers). The plan's fingerprint
(relaybatch/run/fingerprint.py says what it means): ``runs.plan_summary``, ``plan_inputs`` (every
file the plan read, its size and sha256) and ``plan_rows`` (64-bit digests of every planned row's
request key and item id, with its line), written in the transaction that plans the items and
forgotten by any other write of items.

Each fact is kept once (docs/architecture.md, "Stores on disk"): an item's times are its
events'; results keep the answer's own ``usage`` and the results' token columns are read from it
(``normalize.result_tokens``); a data file's path and a job's name are kept once (``source_files``,
``jobs``), items keep their ids. ``PRAGMA user_version`` is the layout: 0 for stores made before
versions (events keyed by the item's text key with ISO text times; items with ``created_at`` and
``updated_at``), 1 (items with their source as "path:line" text and ISO submitted/finished times),
2 (the job's name on every item), 3 (this one); older layouts are migrated when opened for
writing, read as they are when opened read-only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.engine.states import (
    ALL_STATES,
    CANCELLED,
    DONE,
    FAILED,
    PENDING,
    POLLING,
    RETRY_POLL,
    RETRY_SEND,
    SENDING,
    SETTLED_STATES,
    SUBMITTED,
    SUPERSEDABLE_STATES,
    SUPERSEDED,
    TERMINAL_STATES,
    UNCERTAIN,
    IllegalTransition,
    allowed_pairs,
    is_allowed,
)
from relaybatch.lean_imports import import_sqlite_utils
from relaybatch.manifests import Item
from relaybatch.sqlite_batches import json_array, json_columns, read_snapshot, transaction

if TYPE_CHECKING:
    import sqlite_utils
else:
    sqlite_utils = import_sqlite_utils()  # without pandas (lean_imports.py)

__all__ = [
    "CANCELLED",
    "DONE",
    "FAILED",
    "PENDING",
    "PLANNED_ID",
    "PLANNED_KEY",
    "POLLING",
    "SENDING",
    "SUBMITTED",
    "SUPERSEDED",
    "TERMINAL_STATES",
    "UNCERTAIN",
    "Change",
    "CheckpointStore",
    "IllegalTransition",
    "PlanCounts",
    "PlanRecord",
    "Row",
]

# Which manifest the run belongs to (identity), and when its last execution started and ended
# (started without an end: the process died).
_RUN_COLUMNS_ADDED = (
    "manifest_path",
    "manifest_sha256",
    "execution_started_at",
    "execution_ended_at",
    "plan_summary",
)
# plan_rows.kind: what a digest is of.
PLANNED_KEY, PLANNED_ID = 0, 1
# The event of an item the manifest names anew (same key, another id or carried values): no state.
RENAMED = "renamed"
# Page cache of a writer's connection, in KiB, and of whole-table reads (``scanning``). 8 MB is
# full by 20,000 items, so the run's memory is the same at a million; 32 MB was still filling at
# 200,000 and cost the same CPU per item (benchmarks/RESULTS.md, issue 19 target 2).
CACHE_KIB = 8_000
# Page size of a new store's file. An item row grows from about 200 to about 620 bytes when its
# answer is written, and the page splits that leaves set the free space: 8 KiB pages leave 37 bytes
# per item unused where 4 KiB pages left 63-73 (16 KiB: 49), at the same CPU per item
# (benchmarks/RESULTS.md, "Disk per item").
PAGE_SIZE = 8192
SCAN_CACHE_KIB = 2_000
# Rows per statement when adding items: big enough that per-statement costs vanish (1,000 rows
# planned no slower than 5,000), small enough that a chunk's items (Python objects with their
# requests) stay a few megabytes. With 5,000, planning a million rows left Python's small-object
# arenas 15 MB bigger for the rest of the run than planning 20,000 (an arena goes back only when
# all of it is free; the few objects that outlive a chunk keep arenas of its size): the run's peak
# at a million items 171 MB against 155 with 1,000 (benchmarks/RESULTS.md, issue 19 target 2).
ADD_CHUNK_ROWS = 1000
# Columns read for an item about to be sent or polled (not the result, which can be large).
WORK_COLUMNS = ("rowid", "key", "item_id", "job", "kind", "request", "state", "attempts", "remote_id")
# The column that orders ``iter_items``'s merged streams (a name no item column has).
_ORDER = "rowid_order_"
# When a fold (``absorb``) takes another store's row of an item over ours: ours is pending or failed
# and theirs has gone further, anything but pending; a failed row of theirs only when it has sent
# more requests than ours (``attempts`` counts every request sent, so more is newer) or ours never
# sent one. A failure taken once is then ours: folding it again every run would take it again and
# again, and each fold that takes rows makes the next plan a whole one.
_FURTHER_SQL = (
    f"items.state in ('{PENDING}', '{FAILED}') and excluded.state != '{PENDING}' "
    f"and (excluded.state != '{FAILED}' or coalesce(excluded.attempts, 0) > coalesce(items.attempts, 0) "
    f"or items.state = '{PENDING}' and coalesce(items.attempts, 0) = 0)"
)
# The state machine as an SQL list: an update only touches rows whose "old>new" is in it.
_ALLOWED_SQL = "(" + ", ".join(f"'{pair}'" for pair in allowed_pairs()) + ")"
# The store's layout (PRAGMA user_version); 0 is the layout before versions (see the docstring).
SCHEMA_VERSION = 3
# Items as layouts 2 and 3 keep them. ``source`` (the data file and line an item came from, for
# messages) is the file's id in ``source_files`` and the line (layout 2); submitted/finished times
# are integer milliseconds since the epoch (layout 2); ``job`` is the job's id in ``jobs`` (layout
# 3). Readers still see ``source`` as "path:line" and ``job`` as its name (``_column_sql``).
_ITEMS_DDL = (
    "create table if not exists {name} (key text primary key, item_id text not null, "
    "job integer not null, kind text not null, request text not null, carry text, "
    "source_file integer, source_line integer, state text not null, attempts integer default 0, "
    "remote_id text, last_error text, result text, not_before real, submitted_at integer, "
    "finished_at integer, latency_ms real, limiter_wait_ms real, cost_usd text, cost_detail text, "
    "retryable integer)"
)
_ITEM_INDEXES = (
    'create index if not exists "idx_items_state" on items (state)',
    'create index if not exists "idx_items_job_state" on items (job, state)',
)
_SOURCE_FILES_DDL = (
    "create table if not exists source_files (id integer primary key, path text not null unique)"
)
_JOBS_DDL = "create table if not exists jobs (id integer primary key, name text not null unique)"
# Layout 3's job as its name.
_JOB_SQL = "(select name from jobs where id = {0}.job)"
# An item as every reader sees it, whatever the layout (``source`` is read through _SOURCE_SQL).
ITEM_COLUMNS = (
    "key",
    "item_id",
    "job",
    "kind",
    "request",
    "carry",
    "source",
    "state",
    "attempts",
    "remote_id",
    "last_error",
    "result",
    "not_before",
    "submitted_at",
    "finished_at",
    "latency_ms",
    "limiter_wait_ms",
    "cost_usd",
    "cost_detail",
    "retryable",
)
# Columns a change may set besides state (what an answer, a retry or a poll writes: those after the
# state); anything else is a programming error, caught early.
_CHANGEABLE = frozenset(ITEM_COLUMNS[ITEM_COLUMNS.index("state") + 1 :])
_TIME_COLUMNS = ("submitted_at", "finished_at")
# Layout 2's source as the text the item was planned with: "path:line", or the path alone.
_SOURCE_SQL = (
    "(select path from source_files where id = {0}.source_file) || coalesce(':' || {0}.source_line, '')"
)
# Text "path:line" (layouts 0 and 1) split as ``split_source`` does: the path, and the line when the
# text ends in ':' and digits an integer writes back the same (else the whole text is the path).
_SOURCE_HEAD_SQL = "rtrim({0}, '0123456789')"
_SOURCE_HAS_LINE_SQL = (
    "(substr({head}, -1) = ':' and length({head}) < length({0}) and length({0}) - length({head}) < 19 "
    "and cast(substr({0}, length({head}) + 1) as integer) || '' = substr({0}, length({head}) + 1))"
)
_SOURCE_PATH_SQL = "case when {has_line} then substr({head}, 1, length({head}) - 1) else {0} end"
_SOURCE_LINE_SQL = "case when {has_line} then cast(substr({0}, length({head}) + 1) as integer) end"
# ISO text as ``now_text`` writes it to integer milliseconds, exactly; other text is kept as it is
# (a reader shows it as it did: the results export writes null for text that is not a time).
_ISO_MS_SQL = (
    "case when {0} glob '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
    ".[0-9][0-9][0-9]+00:00' "
    "then cast(strftime('%s', {0}) as integer) * 1000 + cast(substr({0}, 21, 3) as integer) else {0} end"
)
# An event's integer milliseconds as the ISO text ``now_text`` writes (exact: SQLite keeps times
# as integer milliseconds internally).
_EVENT_AT_SQL = "strftime('%Y-%m-%dT%H:%M:%f', {0} / 1000.0, 'unixepoch') || '+00:00'"
# JSON text as the store keeps it: keys sorted, no spaces after separators.
_COMPACT = (",", ":")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def now_ms() -> int:
    """Milliseconds since the epoch: an event's time as the store keeps it."""
    return time.time_ns() // 1_000_000


def split_source(source: str | None) -> tuple[str | None, int | None]:
    """An item's source text as (path, line): "data.jsonl:12" is ("data.jsonl", 12); text not
    ending in ':' and a line an integer writes back the same ("notes", "a:007") is all path.
    ``join_source`` gives the text back exactly."""
    if source is None:
        return None, None
    path, colon, line = source.rpartition(":")
    if colon and line.isascii() and line.isdigit() and len(line) < 19 and str(int(line)) == line:
        return path, int(line)
    return source, None


def join_source(path: str | None, line: int | None) -> str | None:
    if path is None:
        return None
    return path if line is None else f"{path}:{line}"


def source_sql(column: str, part: str) -> str:
    """SQL of the path (``part`` "path") or line ("line") of a "path:line" text ``column``."""
    head = _SOURCE_HEAD_SQL.format(column)
    has_line = _SOURCE_HAS_LINE_SQL.format(column, head=head)
    template = _SOURCE_PATH_SQL if part == "path" else _SOURCE_LINE_SQL
    return template.format(column, head=head, has_line=has_line)


def time_ms(value: Any) -> Any:
    """A submitted/finished time as the store keeps it: ISO 8601 text (naive: UTC) as integer
    milliseconds since the epoch; integers and None as they are; other text kept as given."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=_COMPACT, default=str)


@dataclass(frozen=True)
class PlanCounts:
    """What planning the current manifest into the store did."""

    added: int
    superseded: int
    restored: int


@dataclass(frozen=True)
class PlanRecord:
    """A plan's fingerprint, written in the transaction that plans its items.

    ``complete``: the plan covered the whole manifest (the record replaces the last one, and items
    it no longer produces are superseded); else it added rows appended since (the record grows).
    ``seen``: (PLANNED_KEY or PLANNED_ID, a duplicate finder's table file) whose rows to keep."""

    summary: dict[str, Any]
    inputs: Iterable[Sequence[Any]]  # (path, role, size, sha256, detail JSON)
    seen: Sequence[tuple[int, Path]] = ()
    complete: bool = True


@dataclass(frozen=True)
class Change:
    """One item moving to ``state``, with the columns that change alongside it."""

    key: str
    state: str
    fields: dict[str, Any] = field(default_factory=dict)
    detail: str | None = None


class CheckpointStore:
    """Items, their states and results for one run, in one SQLite file."""

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
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # Before anything is written (a store that exists keeps its own until a migration: _vacuum).
        connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
        connection.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a process crash (our failure model); only an OS
        # crash or power loss can drop the last transactions, and never corrupts the file.
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=10000")
        # A bounded page cache (CACHE_KIB); checkpointing the WAL every ~16 MB instead of every
        # 4 MB halves the time commits spend copying pages.
        connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        connection.execute("PRAGMA wal_autocheckpoint=4000")
        self.db = sqlite_utils.Database(connection)
        self._create_tables()
        self._events_by_rowid = True
        self._compact_items = True
        self._job_ids = True

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

    def _create_tables(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{self.path}: checkpoint layout {version} is newer than this relaybatch's "
                f"({SCHEMA_VERSION}); open it with a newer relaybatch"
            )
        fresh = "items" not in self.db.table_names()
        self._create_current_tables(fresh)
        if version == SCHEMA_VERSION:
            return
        with transaction(self.db.conn):  # all or nothing: a crash leaves the old layout
            # Read again inside the write lock: another process may have migrated it meanwhile.
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            migrated = not fresh and version < SCHEMA_VERSION
            if migrated:
                self._migrate_events()
                self._rebuild_items()
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if migrated:
            self._compact_file()

    def _compact_file(self) -> None:
        """After a migration: the old tables' pages, now free, given back to the file system
        (``VACUUM``; about 2 s for 200,000 items, once), else the file would keep both copies'
        size until later writes reused them, and the file rewritten with a new store's pages
        (``_vacuum``). Not essential: skipped when another connection holds the store (the free
        pages are reused then). Never waits for a reader: one that opened the old layout reads its
        snapshot until it closes (``_read_old_layout_as_it_is``), and the checkpoint would wait for
        it (busy_timeout) only to be skipped; later checkpoints finish it."""
        try:
            self._vacuum()
            self.db.execute("PRAGMA busy_timeout=0")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError:
            pass
        finally:
            self.db.execute("PRAGMA busy_timeout=10000")

    def _vacuum(self) -> None:
        """``VACUUM``, with PAGE_SIZE pages when nobody else has the file open. A WAL file's page
        size is fixed, so the store leaves WAL mode for the rewrite and comes back to it; SQLite
        refuses to leave while another connection has the file open (a reader: then the old page
        size is kept). No other writer can come meanwhile: whoever opens a store for writing holds
        its folder's lock (run/locking.py), and a crash in between leaves a whole store in rollback
        mode, which the next writer's open puts back in WAL mode."""
        self.db.execute("PRAGMA busy_timeout=0")
        try:
            resized = self.db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
        except sqlite3.OperationalError:  # "database is locked": a reader has it open
            resized = False
        finally:
            self.db.execute("PRAGMA busy_timeout=10000")
        try:
            if resized:
                self.db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self.db.execute("VACUUM")
        finally:
            if resized:
                self.db.execute("PRAGMA journal_mode=WAL")

    def _rebuild_items(self) -> None:
        """Layouts 0, 1 and 2 to 3, in one copy of the table (rowids kept: events refer to them):
        ``job`` becomes the job's id in ``jobs``; from layouts 0 and 1 also ``source`` "path:line"
        becomes a ``source_files`` id and the line, and submitted/finished ISO times integer
        milliseconds; layout 0's ``created_at``/``updated_at`` are not copied (no reader used them;
        an item's times are its events')."""
        columns = self.db.table("items").columns_dict
        if columns.get("job") is int:
            return  # another process migrated it first
        values = {name: f"items.{name}" if name in columns else "null" for name in ITEM_COLUMNS}
        del values["source"]
        if "source_file" in columns:  # layout 2
            values["source_file"], values["source_line"] = "items.source_file", "items.source_line"
        else:
            values.update(self._from_source_text("items", "items", "main", columns))
        self.db.execute(
            "insert or ignore into jobs (name) select job from items group by job order by min(rowid)"
        )
        values["job"] = "(select id from jobs where name = items.job)"
        self.db.execute(_ITEMS_DDL.format(name="items_next"))
        self.db.execute(
            f"insert into items_next (rowid, {', '.join(values)}) "
            f"select rowid, {', '.join(values.values())} from items order by rowid"
        )
        self.db.execute("drop table items")
        self.db.execute("alter table items_next rename to items")
        for statement in _ITEM_INDEXES:
            self.db.execute(statement)

    def _migrate_events(self) -> None:
        """Layout 0 to 1: events refer to their item by rowid and keep integer milliseconds
        (was the 32-character key and 29 characters of ISO text, twice per item)."""
        if "events" not in self.db.table_names():
            self._create_events()
            return
        if "item" in self.db.table("events").columns_dict:
            return  # another process migrated it first
        self.db.execute("alter table events rename to events_before_1")
        self._create_events()
        # ISO text of a known shape to integer milliseconds, exactly (no floating point): the
        # seconds from strftime('%s') (which applies the offset) and the milliseconds as written.
        self.db.execute(
            "insert into events (id, item, state, detail, at) "
            "select e.id, i.rowid, e.state, e.detail, "
            "cast(strftime('%s', e.at) as integer) * 1000 + cast(substr(e.at, 21, 3) as integer) "
            "from events_before_1 e left join items i on i.key = e.key and e.key != '' order by e.id"
        )
        self.db.execute("drop table events_before_1")

    def _create_events(self) -> None:
        self.db.execute(
            "create table if not exists events "
            "(id integer primary key, item integer, state text, detail text, at integer)"
        )

    def _create_current_tables(self, fresh: bool) -> None:
        self.db.table("runs").create(
            {"name": str, "created_at": str, "updated_at": str, "settings": str, "stop_reason": str},
            pk="name",
            if_not_exists=True,
        )
        # Added later: stores made before them gain the columns when opened.
        present = set(self.db.table("runs").columns_dict)
        for column in _RUN_COLUMNS_ADDED:
            if column not in present:
                self.db.table("runs").add_column(column, str)
        self.db.execute(_ITEMS_DDL.format(name="items"))
        self.db.execute(_SOURCE_FILES_DDL)
        self.db.execute(_JOBS_DDL)
        for statement in _ITEM_INDEXES:
            self.db.execute(statement)
        self.db.table("price_snapshots").create(
            {"id": int, "model": str, "provider": str, "pricing": str, "fetched_at": str},
            pk="id",
            if_not_exists=True,
        )
        if fresh:
            self._create_events()
        self.db.execute(
            "create table if not exists plan_inputs "
            "(path text primary key, role text, size integer, sha256 text, detail text)"
        )
        self.db.execute(
            "create table if not exists plan_rows (kind integer, digest integer, job integer, "
            "line integer, primary key (kind, digest)) without rowid"
        )

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
        self.db.execute(f"PRAGMA cache_size=-{SCAN_CACHE_KIB}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size={int(previous)}")

    @classmethod
    def open_read_only(cls, path: Path) -> CheckpointStore:
        return cls(path, read_only=True)

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Every read inside sees the store as at the first one (an export beside an execution:
        run/snapshot.py), while the execution goes on writing."""
        return read_snapshot(self.db.conn)

    def layout(self) -> int:
        """The store's layout (``PRAGMA user_version``); below SCHEMA_VERSION, the first open for
        writing migrates it."""
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the run ----------------------------------------------------------------------------

    def run_settings(self) -> dict[str, Any]:
        row = self.db.execute("select settings from runs order by rowid limit 1").fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def save_run(self, name: str, settings: dict[str, Any] | None = None) -> None:
        """Create or update the run's row; settings given replace the stored ones."""
        stamp = now_text()
        with self.db.conn:
            self.db.execute(
                "insert into runs (name, created_at, updated_at, settings) values (?, ?, ?, ?) "
                "on conflict(name) do update set updated_at = excluded.updated_at, "
                "settings = coalesce(excluded.settings, runs.settings)",
                [name, stamp, stamp, None if settings is None else json.dumps(settings, sort_keys=True)],
            )

    def record_manifest(self, path: str, sha256: str) -> None:
        """Remember which manifest the run belongs to (its path and content hash)."""
        self._update_run({"manifest_path": path, "manifest_sha256": sha256})

    def manifest(self) -> tuple[str, str] | None:
        """(path, sha256) of the run's manifest, or None for a store that never recorded one."""
        row = self.db.execute(
            "select manifest_path, manifest_sha256 from runs order by rowid limit 1"
        ).fetchone()
        return (str(row[0]), str(row[1])) if row and row[0] else None

    def record_start(self) -> None:
        """An execution begins: until ``record_stop``, a reader sees it running (or dead)."""
        self._update_run(
            {"execution_started_at": now_text(), "execution_ended_at": None, "stop_reason": None}
        )

    def record_stop(self, reason: str | None) -> None:
        """Remember how the last execution ended: why it stopped early, or None (it finished)."""
        self._update_run({"stop_reason": reason, "execution_ended_at": now_text()})

    def last_execution(self) -> dict[str, str | None]:
        """started_at, ended_at and stop_reason of the last execution (all None before any)."""
        row = self.db.execute(
            "select execution_started_at, execution_ended_at, stop_reason from runs order by rowid limit 1"
        ).fetchone()
        started, ended, reason = row if row else (None, None, None)
        return {"started_at": started, "ended_at": ended, "stop_reason": reason}

    def _update_run(self, values: dict[str, Any], in_transaction: bool = False) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        with contextlib.nullcontext() if in_transaction else transaction(self.db.conn):
            if self.db.execute("select count(*) from runs").fetchone()[0] == 0:
                self.db.execute(
                    "insert into runs (name, created_at, updated_at) values (?, ?, ?)",
                    [self.path.parent.name, now_text(), now_text()],
                )
            self.db.execute(f"update runs set {assignments}, updated_at = ?", [*values.values(), now_text()])

    def stop_reason(self) -> str | None:
        row = self.db.execute("select stop_reason from runs order by rowid limit 1").fetchone()
        return row[0] if row else None

    def run_name(self) -> str | None:
        """The run's name as recorded (a shard's store names its whole run)."""
        row = self.db.execute("select name from runs order by rowid limit 1").fetchone()
        return str(row[0]) if row and row[0] else None

    # -- items in ---------------------------------------------------------------------------

    def add_items(self, items: Iterable[Item]) -> int:
        """Insert items not seen before; items already in the store keep their state.

        All of them in one transaction (a crash leaves none), sent in chunks of rows as JSON
        arrays: one ``insert ... select from json_each(?)`` per chunk instead of one statement per
        item (see ``apply``)."""
        with transaction(self.db.conn):
            self._forget_plan()
            return sum(self._insert_chunk(chunk) for chunk in _chunks(items, ADD_CHUNK_ROWS))

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
                self.db.execute(
                    "create temp table if not exists current_keys "
                    "(key text primary key, item_id text, carry text, source_file integer, "
                    "source_line integer)"
                )
                self.db.execute("delete from current_keys")
                added = 0
                for chunk in _chunks(items, ADD_CHUNK_ROWS):
                    skipped = skip([item.key for item in chunk]) if skip else set()
                    sources = self._sources(item.source for item in chunk)
                    added += self._insert_chunk([item for item in chunk if item.key not in skipped], sources)
                    self.db.conn.executemany(
                        "insert or ignore into current_keys (key, item_id, carry, source_file, source_line) "
                        "values (?, ?, ?, ?, ?)",
                        [
                            [item.key, item.item_id, compact_json(item.carry), *sources[item.source]]
                            for item in chunk
                        ],
                    )
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

    # -- the plan's fingerprint (what it means: relaybatch/run/fingerprint.py) ---------------

    def _write_plan_record(self, record: PlanRecord) -> list[str]:
        """Inside the plan's transaction; returns the databases attached (detached after it)."""
        if record.complete:
            self.db.execute("delete from plan_inputs")
            self.db.execute("delete from plan_rows")
        self.db.conn.executemany(
            "insert or replace into plan_inputs (path, role, size, sha256, detail) values (?, ?, ?, ?, ?)",
            record.inputs,
        )
        attached = []
        for index, (kind, path) in enumerate(record.seen):
            name = f"seen{index}"
            self.db.execute(f"attach database ? as {name}", [str(path)])
            attached.append(name)
            self.db.execute(
                "insert or replace into plan_rows (kind, digest, job, line) "
                f"select ?, digest, job, line from {name}.seen",
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

    def settled_keys(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` whose work is done, paid for or possibly paid for here (done, in
        flight, uncertain): another store of the same run must never send them."""
        sql = (
            "select key from items where key in (select value from json_each(?)) "
            f"and state in ({', '.join(repr(state) for state in sorted(SETTLED_STATES))})"
        )
        return {row[0] for row in self.db.execute(sql, [json.dumps(list(keys))])}

    def absorb(self, other: Path) -> int:
        """Fold another store of the same run (a shard's) into this one; returns the rows taken.

        Not a move of the state machine: the other store's record of an item replaces this
        store's copy only when this one is missing, pending or failed and the other has gone
        further (``_FURTHER_SQL``). Events stay in the other store (reports read both). Folding the
        same stores again takes nothing (0): a row taken once is then this store's own."""
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
                    "from other.items as x where true "
                    f"on conflict(key) do update set {updates} where {_FURTHER_SQL}"
                )
                taken = int(cursor.rowcount)
                if taken:
                    self._forget_plan()  # rows a shard planned, perhaps from another manifest version
                    # A run event: rows changed without events of their own (change_mark moves).
                    self.db.execute(
                        "insert into events (item, state, detail, at) values (null, 'absorbed', ?, ?)",
                        [json.dumps({"store": str(other), "rows": taken}), now_ms()],
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
            values.update(self._from_source_text("other.items as x", "x", "main", values))
        return values

    def _from_source_text(
        self, table: str, alias: str, database: str, columns: Collection[str]
    ) -> dict[str, str]:
        """Layouts 0 and 1 (``source`` as "path:line" text, ISO times) as layout 2 and after: each
        data file's path into ``database``'s ``source_files`` (in the order of their first items),
        and the columns that read ``table`` (as ``alias``) in those terms: the file's id, the line,
        and the times ``columns`` has as integer milliseconds. Migration and absorb share it."""
        path = source_sql(f"{alias}.source", "path")
        self.db.execute(
            f"insert or ignore into {database}.source_files (path) select {path} from {table} "
            f"where {alias}.source is not null group by 1 order by min({alias}.rowid)"
        )
        values = {
            "source_file": f"(select id from {database}.source_files where path = {path})",
            "source_line": source_sql(f"{alias}.source", "line"),
        }
        for name in _TIME_COLUMNS:
            if name in columns:
                values[name] = _ISO_MS_SQL.format(f"{alias}.{name}")
        return values

    def _move_matching(self, where: str, change_for: Any, stamp: int) -> int:
        """Apply ``change_for(has_result)`` to every item matching ``where``, a page at a time,
        through the checked write path; inside the caller's transaction."""
        moved = 0
        while True:
            rows = self.db.execute(
                f"select key, result is not null from items where {where} order by rowid limit ?",
                [ADD_CHUNK_ROWS],
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

    # -- state changes ----------------------------------------------------------------------

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
            values = [_column_value(name, change.fields[name]) for name in columns]
            by_columns.setdefault(columns, []).append([change.key, change.state, *values])
        for columns, rows in by_columns.items():
            array = json_array(rows)
            if array is None:
                assignments = "".join(f", {name} = ?" for name in columns)
                cursor = self.db.conn.executemany(
                    f"update items set state = ?{assignments} "
                    f"where key = ? and (state || '>' || ?) in {_ALLOWED_SQL}",
                    [[state, *values, key, state] for key, state, *values in rows],
                )
            else:
                assignments = "".join(
                    f", {name} = j.value ->> {index}" for index, name in enumerate(columns, 2)
                )
                cursor = self.db.conn.execute(
                    f"update items set state = j.value ->> 1{assignments} "
                    "from json_each(?) as j where items.key = j.value ->> 0 "
                    f"and (items.state || '>' || (j.value ->> 1)) in {_ALLOWED_SQL}",
                    [array],
                )
            if cursor.rowcount != len(rows):
                return True
        return False

    def _illegal(self, changes: Sequence[Change]) -> IllegalTransition:
        """The first of ``changes`` the state machine forbids, replayed from the store's states
        (the transaction that tried them was rolled back): its key, where it stood, where it went."""
        states: dict[str, str | None] = {}
        for change in changes:
            if change.key not in states:
                found = self.db.execute("select state from items where key = ?", [change.key]).fetchone()
                states[change.key] = None if found is None else str(found[0])
            old = states[change.key]
            if old is None or not is_allowed(old, change.state):
                return IllegalTransition(change.key, old, change.state)
            states[change.key] = change.state
        return IllegalTransition(changes[0].key, None, changes[0].state)  # not reachable

    # -- items out --------------------------------------------------------------------------

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
            (rowid, key, kind, remote, _decoded({"result": result})["result"], note)
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
        return _decoded(dict(zip(names, row, strict=True)))

    def _selected(self, columns: Sequence[str] | None) -> str:
        """SQL select list of an item's ``columns`` (all when None) as readers see them: from
        layout 2, ``source`` is rebuilt as "path:line" from the file's id and the line; from layout
        3, ``job`` is the job's name."""
        if not self._compact_items and not self._job_ids:
            return ", ".join(columns or ["*"])
        return ", ".join(self._column_sql(name) for name in columns or ITEM_COLUMNS)

    def _column_sql(self, name: str) -> str:
        if name == "source" and self._compact_items:
            return f"{_SOURCE_SQL.format('items')} as source"
        if name == "job" and self._job_ids:
            return f"{_JOB_SQL.format('items')} as job"
        return name

    def _job_name_sql(self, table: str) -> str:
        """SQL: the job's name of a row of ``table`` (an alias over items' columns)."""
        return _JOB_SQL.format(table) if self._job_ids else f"{table}.job"

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
            yield _decoded(dict(zip(names, values, strict=True)))

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

    def failure_reasons(self) -> list[tuple[str, str, int, str]]:
        """(state, reason, items, one item key) for failed and uncertain items, grouped by reason."""
        sql = (
            "select state, coalesce(last_error, 'no reason recorded'), count(*), min(key) from items "
            "where state in ('failed', 'uncertain') group by 1, 2"
        )
        return [(state, reason, count, key) for state, reason, count, key in self.db.execute(sql)]

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
                    [*args, ADD_CHUNK_ROWS],
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

    def calls(self, states: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """Every distinct (job, kind, model) in the store (of items in ``states`` when given, read
        through the state index); model is '' for routes without one."""
        sql = "select distinct job, kind, coalesce(json_extract(request, '$.model'), '') as model from items"
        if states:
            sql += f" where state in ({', '.join('?' for _ in states)})"
        sql = f"select {self._job_name_sql('c')}, kind, model from ({sql}) as c"
        return [(job, kind, model) for job, kind, model in self.db.execute(sql, list(states))]

    def record_run_event(self, state: str, detail: dict[str, Any]) -> None:
        """A run-level event, not an item's (key ""): e.g. the limiter's limit and 429s so far,
        which the dashboard draws over time."""
        with transaction(self.db.conn):
            self.db.execute(
                "insert into events (item, state, detail, at) values (null, ?, ?, ?)",
                [state, json.dumps(detail), now_ms()],
            )

    def iter_events(self) -> Iterator[dict[str, Any]]:
        """Every event in order, with its item's key and kind, streamed; ``at`` as ISO text."""
        if self._events_by_rowid:
            sql = (
                "select coalesce(i.key, '') as key, e.state, e.detail, "
                f"{_EVENT_AT_SQL.format('e.at')} as at, i.kind "
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
                f"select e.id, ? as key, e.state, e.detail, {_EVENT_AT_SQL.format('e.at')} as at "
                "from events e where e.item = (select rowid from items where key = ?) order by e.id"
            )
            args = [key, key]
        else:  # layout 0, opened read-only
            sql, args = "select id, key, state, detail, at from events where key = ? order by id", [key]
        cursor = self.db.conn.execute(sql, args)
        names = [description[0] for description in cursor.description]
        return [dict(zip(names, values, strict=True)) for values in cursor]

    # -- prices -----------------------------------------------------------------------------

    def save_price_snapshot(self, model: str, pricing: dict[str, Any], provider: str | None = None) -> None:
        """Keep the prices a run used beside its items (prices change; the snapshot does not)."""
        with self.db.conn:
            self.db.table("price_snapshots").insert(
                {
                    "model": model,
                    "provider": provider,
                    "pricing": json.dumps(pricing, sort_keys=True),
                    "fetched_at": now_text(),
                }
            )

    def price_snapshot(self, model: str, provider: str | None = None) -> dict[str, Any] | None:
        row = self.db.execute(
            "select pricing from price_snapshots where model = ? and provider is ? order by id desc limit 1",
            [model, provider],
        ).fetchone()
        return json.loads(row[0]) if row else None


@dataclass(frozen=True, slots=True)
class Row:
    """An item as the engine works on it: what to send, and where it stands."""

    rowid: int
    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]
    state: str
    attempts: int
    remote_id: str | None

    @classmethod
    def from_tuple(cls, row: Sequence[Any]) -> Row:
        rowid, key, item_id, job, kind, request, state, attempts, remote_id = row
        return cls(rowid, key, item_id, job, kind, json.loads(request), state, attempts, remote_id)


def _chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


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


def _column_value(name: str, value: Any) -> Any:
    if name == "result" and isinstance(value, dict):
        # A key whose value is null says nothing a reader's .get() would not: not written.
        value = {key: item for key, item in value.items() if item is not None}
    if name in ("result", "cost_detail") and value is not None and not isinstance(value, str):
        return compact_json(value)
    if name == "cost_usd" and value is not None:
        return format(Decimal(value), "f")  # exact, in plain notation; never a float
    if name in _TIME_COLUMNS:
        return time_ms(value)
    return value


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    if "request" in row:
        row["request"] = json.loads(row["request"])
    if "carry" in row:
        row["carry"] = json.loads(row["carry"]) if row["carry"] else {}
    if "result" in row:
        row["result"] = json.loads(row["result"]) if row["result"] else None
    return row


class _Skipped(Exception):
    """An update skipped a row: an illegal move, named once the transaction is rolled back."""


def epoch() -> float:
    """Wall-clock seconds: not-before times must survive a restart, so no monotonic clock here."""
    return time.time()
