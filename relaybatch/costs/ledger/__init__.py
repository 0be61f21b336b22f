"""The cost ledger: one row per billable call, kept in SQLite during the run, exported to Parquet.

Rows are written to the run's ``costs.sqlite`` no later than the checkpoint commit of the item
state they belong to (the spend guard queues them and the engine commits them first), so a crash
loses no charge the run's items account for, and a resumed run knows what it already spent.
``write_ledger`` turns them into ``ledger.parquet`` with money as Arrow decimal128(38, 18): exact,
never float.

The store keeps each fact once (docs/costs.md, "The cost store"): settled rows in ``charge_rows``
(``WITHOUT ROWID``, keyed by ``(item_key, call)``: no separate id or index; ``attempt-N`` kept as
the integer N; ``charged_at`` as integer microseconds; run, job, model and price paths as ids of
``texts``; ``known_usd`` null when it is ``usd``), calls in flight in the narrow ``reservations``
(a row moves to ``charge_rows`` when it settles, so no wide row is ever rewritten), and the view
``charges`` shows both with the ledger's columns exactly as before. ``PRAGMA user_version`` is the layout: 0
for stores made before it (one ``charges`` table), migrated when opened for writing; a reader beside a
running execution opens it read-only (``CostStore.open_read_only``) and reads any layout as it is.

A package behind this face (import from ``relaybatch.costs.ledger``): ``rows.py`` (a ledger row, its
flat record and amounts, the Arrow schema), ``layout.py`` (the tables, the view, the statements,
a row's stored values), ``store.py`` (``CostStore``: open, check, migrate, write, read) and
``export.py`` (``write_ledger``, ``ledger_table``, ``read_ledger``: the Parquet read back). SQL
lives in ``layout.py`` and ``store.py`` only
(and the export's one read of the view).
"""

from __future__ import annotations

from relaybatch.costs.ledger.export import (
    CONVERT_ROWS,
    EXPORT_BATCH_ROWS,
    LEDGER_EXPORT,
    charged_calls_in,
    ledger_table,
    read_ledger,
    unknown_outcomes_in,
    write_ledger,
)
from relaybatch.costs.ledger.layout import SCHEMA_VERSION, TEXT_ID_COLUMNS
from relaybatch.costs.ledger.rows import (
    CHARGED,
    MONEY,
    NOT_CHARGED,
    OUTCOME_UNKNOWN,
    RESERVED,
    REUSED,
    SECONDS_COLUMNS,
    UNKNOWN,
    USAGE_COLUMNS,
    LedgerRow,
    budget_amount,
    build_row,
    flat_record,
    known_amount,
    ledger_schema,
    unknown_amount,
)
from relaybatch.costs.ledger.store import CostStore, SpendTotals

__all__ = [
    "CHARGED",
    "CONVERT_ROWS",
    "EXPORT_BATCH_ROWS",
    "LEDGER_EXPORT",
    "MONEY",
    "NOT_CHARGED",
    "OUTCOME_UNKNOWN",
    "RESERVED",
    "REUSED",
    "SCHEMA_VERSION",
    "SECONDS_COLUMNS",
    "TEXT_ID_COLUMNS",
    "UNKNOWN",
    "USAGE_COLUMNS",
    "CostStore",
    "LedgerRow",
    "SpendTotals",
    "budget_amount",
    "build_row",
    "charged_calls_in",
    "flat_record",
    "known_amount",
    "ledger_schema",
    "ledger_table",
    "read_ledger",
    "unknown_amount",
    "unknown_outcomes_in",
    "write_ledger",
]
