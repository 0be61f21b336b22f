"""The checkpoint's layout: its tables, their columns, and the SQL that reads every layout alike.

``SCHEMA_VERSION`` is the current layout (``PRAGMA user_version``); migrations.py lists how each
earlier one is brought to it. Sizes of pages, caches and chunks are here with the figures that chose them.
"""

from __future__ import annotations

# Which manifest the run belongs to (identity), and when its last execution started and ended
# (started without an end: the process died).
RUN_COLUMNS_ADDED = (
    "manifest_path",
    "manifest_sha256",
    "execution_started_at",
    "execution_ended_at",
    "plan_summary",
)
# Executions of the run (DESIGN.md invariant 10): one row each, from ``record_start`` to
# ``record_stop`` (an end of null: still running, or its process died). ``entry`` says what started
# it (cli, flow, deployment, schedule, api), ``label`` names it there (a flow run's name), ``added``
# is what the plans before it added, ``sent`` the requests it sent; times are integer milliseconds.
# Items carry the id of the execution that last changed them (``items.execution``), ledger rows the
# id of the execution that sent the call.
EXECUTIONS_DDL = (
    "create table if not exists executions (id integer primary key, started_at integer not null, "
    "ended_at integer, entry text, label text, added integer, sent integer, stop_reason text)"
)
EXECUTION_FIELDS = ("id", "started_at", "ended_at", "entry", "label", "added", "sent", "stop_reason")
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
# The store's layout (PRAGMA user_version); 0 is the layout before versions (see the docstring).
SCHEMA_VERSION = 3
# Items as layouts 2 and 3 keep them. ``source`` (the data file and line an item came from, for
# messages) is the file's id in ``source_files`` and the line (layout 2); submitted/finished times
# are integer milliseconds since the epoch (layout 2); ``job`` is the job's id in ``jobs`` (layout
# 3). Readers still see ``source`` as "path:line" and ``job`` as its name (``_column_sql``).
ITEMS_DDL = (
    "create table if not exists {name} (key text primary key, item_id text not null, "
    "job integer not null, kind text not null, request text not null, carry text, "
    "source_file integer, source_line integer, state text not null, attempts integer default 0, "
    "remote_id text, last_error text, result text, not_before real, submitted_at integer, "
    "finished_at integer, latency_ms real, limiter_wait_ms real, cost_usd text, cost_detail text, "
    "retryable integer, execution integer)"
)
ITEM_INDEXES = (
    'create index if not exists "idx_items_state" on items (state)',
    'create index if not exists "idx_items_job_state" on items (job, state)',
)
SOURCE_FILES_DDL = (
    "create table if not exists source_files (id integer primary key, path text not null unique)"
)
JOBS_DDL = "create table if not exists jobs (id integer primary key, name text not null unique)"
# Layout 3's job as its name.
JOB_SQL = "(select name from jobs where id = {0}.job)"
# An item as every reader sees it, whatever the layout (``source`` is read through SOURCE_SQL).
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
TIME_COLUMNS = ("submitted_at", "finished_at")
# An item row as another store of the run takes it from this one's handoff file (run/handoff.py):
# ITEM_COLUMNS with the source as its file path and line, and the execution that wrote the row.
HANDOFF_COLUMNS = (
    *(
        name
        for column in ITEM_COLUMNS
        for name in (("source_path", "source_line") if column == "source" else (column,))
    ),
    "execution",
)
# Layout 2's source as the text the item was planned with: "path:line", or the path alone.
SOURCE_SQL = (
    "(select path from source_files where id = {0}.source_file) || coalesce(':' || {0}.source_line, '')"
)
# ISO text as ``now_text`` writes it to integer milliseconds, exactly; other text is kept as it is
# (a reader shows it as it did: the results export writes null for text that is not a time).
ISO_MS_SQL = (
    "case when {0} glob '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
    ".[0-9][0-9][0-9]+00:00' "
    "then cast(strftime('%s', {0}) as integer) * 1000 + cast(substr({0}, 21, 3) as integer) else {0} end"
)
# An event's integer milliseconds as the ISO text ``now_text`` writes (exact: SQLite keeps times
# as integer milliseconds internally).
EVENT_AT_SQL = "strftime('%Y-%m-%dT%H:%M:%f', {0} / 1000.0, 'unixepoch') || '+00:00'"
