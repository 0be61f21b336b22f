"""The checkpoint store: SQLite (WAL) is the source of truth for every item's state.

Every state change is a committed write, so a crash at any point leaves a store from which a
resumed run knows exactly what was sent, what answered and what is left. Changes can be applied
one at a time (``transition``) or as a group in one transaction (``apply``): the engine groups
the changes that happen in the same moment, and waits for the commit before acting on them.

Tables: ``runs`` (one row per run: its settings and why it last stopped), ``items`` (state,
attempts, remote id, last error, submitted and finished times, not-before time, result, cost
columns that the costs package fills, the execution that last changed it), ``executions`` (each
execution of the run: executions.py), ``price_snapshots`` (the prices a run used) and ``events``
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

The package (the layout of dagster's run storage: schema, migrations, the SQL store) has one face,
this module: code outside it imports from ``relaybatch.engine.store`` (or ``relaybatch.engine``),
never from its modules, which are internal:

- ``schema.py``: the layout (``SCHEMA_VERSION``), tables, columns, sizes of pages and chunks;
- ``migrations.py``: the named migrations (``MIGRATIONS``, ``listed()``; run the module to print them);
- ``values.py``: how times, sources and JSON are kept; ``Row``, an item as the engine works on it;
- ``records.py``: ``Change``, ``PlanCounts``, ``PlanRecord``;
- ``base.py``: the connection, and the SQL that reads every layout alike;
- ``runs.py``: the run's row and price snapshots;
- ``executions.py``: the run's executions (each CLI run, flow run, scheduled night) and their ids;
- ``writes.py``: the checked write path (``apply``, ``transition``);
- ``planning.py``: ``add_items``, ``plan_items`` and the plan's fingerprint;
- ``absorbing.py``: ``absorb``, folding a shard's store;
- ``reads.py``: every read;
- ``checkpoint.py``: ``CheckpointStore``, made of the above.
"""

from relaybatch.engine.states import (
    CANCELLED,
    DONE,
    FAILED,
    PENDING,
    POLLING,
    SENDING,
    SUBMITTED,
    SUPERSEDED,
    TERMINAL_STATES,
    UNCERTAIN,
    IllegalTransition,
)
from relaybatch.engine.store.checkpoint import CheckpointStore
from relaybatch.engine.store.migrations import MIGRATIONS, Migration
from relaybatch.engine.store.records import Change, PlanCounts, PlanRecord
from relaybatch.engine.store.schema import (
    ADD_CHUNK_ROWS,
    CACHE_KIB,
    HANDOFF_COLUMNS,
    PAGE_SIZE,
    PLANNED_ID,
    PLANNED_KEY,
    SCAN_CACHE_KIB,
    SCHEMA_VERSION,
)
from relaybatch.engine.store.values import Row, epoch, join_source, now_ms, now_text, source_sql, split_source

__all__ = [
    "ADD_CHUNK_ROWS",
    "CACHE_KIB",
    "CANCELLED",
    "DONE",
    "FAILED",
    "HANDOFF_COLUMNS",
    "MIGRATIONS",
    "PAGE_SIZE",
    "PENDING",
    "PLANNED_ID",
    "PLANNED_KEY",
    "POLLING",
    "SCAN_CACHE_KIB",
    "SCHEMA_VERSION",
    "SENDING",
    "SUBMITTED",
    "SUPERSEDED",
    "TERMINAL_STATES",
    "UNCERTAIN",
    "Change",
    "CheckpointStore",
    "IllegalTransition",
    "Migration",
    "PlanCounts",
    "PlanRecord",
    "Row",
    "epoch",
    "join_source",
    "now_ms",
    "now_text",
    "source_sql",
    "split_source",
]
