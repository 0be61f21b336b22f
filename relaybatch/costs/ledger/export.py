"""The ledger exported to Parquet (``write_ledger``): the store's rows read and converted in batches
into row groups, money as Arrow decimal128(38, 18), under a temporary name, then renamed."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from relaybatch.arrow_memory import RowGroupWriter, release_unused
from relaybatch.costs.ledger.rows import MONEY, ledger_schema
from relaybatch.costs.ledger.store import CostStore
from relaybatch.export_marks import is_current, marked
from relaybatch.files import replaced_atomically
from relaybatch.lean_imports import arrow_without_pandas

arrow_without_pandas()


EXPORT_BATCH_ROWS = 10_000  # rows per row group of the ledger Parquet
CONVERT_ROWS = 1_000  # rows read and converted at a time
LEDGER_EXPORT = "ledger"


@functools.lru_cache(maxsize=32)
def _nulls(length: int, type_: pa.DataType) -> pa.Array:
    """An all-null column, made once per length and type and shared by every batch that has one."""
    return pa.nulls(length, type_)


def _column(values: Sequence[Any], column: pa.Field) -> pa.Array:
    if not any(value is not None for value in values):
        # Most of the ledger's 61 columns are empty for a kind (a chat row has no image, audio or
        # video prices): shared, they hold no memory per row group (35 decimal columns are 16
        # bytes a row each, null or not).
        return _nulls(len(values), column.type)
    if column.type == MONEY or pa.types.is_timestamp(column.type):
        try:
            # Exact text to exact decimal; a value with more than 18 decimals is refused, not rounded.
            return pa.array(values, pa.string()).cast(column.type)
        except pa.ArrowInvalid as error:
            raise ValueError(f"ledger column {column.name}: {error}") from None
    if pa.types.is_boolean(column.type):
        return pa.array([None if value is None else bool(value) for value in values], pa.bool_())
    return pa.array(values, column.type)


def ledger_table(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows of the cost store, in ledger-schema column order, as an Arrow table."""
    schema = ledger_schema()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [_column(values, column) for values, column in zip(columns, schema, strict=True)], schema=schema
    )


# -- the store's layout ---------------------------------------------------------------------


def write_ledger(
    store: CostStore, path: Path, batch_rows: int = EXPORT_BATCH_ROWS, rewrite: bool = False
) -> Path:
    """Export the store to Parquet in batches (memory stays flat), under a temporary name, then rename.

    A ledger already exported from the store as it is now (the change mark in its footer) is kept,
    unless ``rewrite`` (`relaybatch export`: trust no mark)."""
    mark = store.change_mark()  # before reading: a write meanwhile makes the next export write again
    if mark and not rewrite and is_current(path, LEDGER_EXPORT, mark):
        return path
    release_unused()  # start from what is live: what the execution freed goes back first
    names = ", ".join(column.name for column in ledger_schema())
    cursor = store.db.conn.execute(f"select {names} from charges order by charged_at, id")
    schema = marked(ledger_schema(), LEDGER_EXPORT, mark) if mark else ledger_schema()
    with replaced_atomically(path) as temporary, RowGroupWriter(temporary, schema) as writer:
        # Rows are read and converted a thousand at a time and gathered as Arrow columns (compact)
        # into row groups of ``batch_rows``: 10,000 rows as Python tuples cost about 60 MB more
        # of peak memory than the whole rest of a run (benchmarks/RESULTS.md, "End to end").
        pending: list[pa.Table] = []
        gathered = 0
        while rows := cursor.fetchmany(min(batch_rows, CONVERT_ROWS)):
            pending.append(ledger_table(rows))
            gathered += len(rows)
            if gathered >= batch_rows:
                writer.write_table(pa.concat_tables(pending))
                pending, gathered = [], 0
                release_unused()  # each row group's buffers go back (arrow_memory.py)
        if pending:
            writer.write_table(pa.concat_tables(pending))
    return path


def read_ledger(path: Path, columns: Sequence[str], since: str = "") -> Iterator[dict[str, Any]]:
    """``columns`` of every charge in a ledger Parquet file made on or after ``since`` (an ISO
    date; "" for all), as ``CostStore.charges_since`` gives them from the store: what a reader on
    another host takes from a store folder it must not open (DESIGN.md invariant 11). Times as the
    store's ISO text; money as Decimal. No file: no charges."""
    import pyarrow.parquet as pq

    if not path.is_file():
        return
    parquet = pq.ParquetFile(path)
    present = set(parquet.schema_arrow.names)
    wanted = [column for column in columns if column in present]
    for batch in parquet.iter_batches(batch_size=EXPORT_BATCH_ROWS, columns=wanted):
        for values in zip(*(column.to_pylist() for column in batch.columns), strict=True):
            record = dict.fromkeys(columns) | dict(zip(wanted, values, strict=True))
            if "known_usd" in record and record["known_usd"] is None:
                record["known_usd"] = Decimal(0)  # as the store's view reads it
            charged_at = record.get("charged_at")
            if isinstance(charged_at, datetime):
                record["charged_at"] = charged_at.isoformat(timespec="milliseconds")
            if since and str(record.get("charged_at") or "") < since:
                continue
            yield record


def unknown_outcomes_in(ledger: Path) -> list[dict[str, Any]]:
    """``CostStore.unknown_outcomes`` from a ledger Parquet file: its rows whose outcome is unknown
    or reserved (a call left in flight), in the file's order (oldest first), each with its ``id``
    (``<item key>:<call>``) and the columns `relaybatch resolve` lists. Only those rows are kept
    (memory stays flat whatever the ledger's size). No file: none."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from relaybatch.costs.ledger.rows import RESERVED, UNKNOWN

    if not ledger.is_file():
        return []
    outcomes = pa.array([UNKNOWN, RESERVED])
    columns = ["item_key", "call", "job", "item_id", "model", "reserved_usd", "outcome", "charged_at"]
    found: list[dict[str, Any]] = []
    for batch in pq.ParquetFile(ledger).iter_batches(columns=columns):
        for row in batch.filter(pc.is_in(batch.column("outcome"), outcomes)).to_pylist():
            found.append({"id": f"{row['item_key']}:{row['call']}", **row})
    return found


def charged_calls_in(ledger: Path, item_keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``CostStore.charged_calls`` from a ledger Parquet file: for each of ``item_keys`` with a
    charge there (charged, or itself reused), the last one's call, model, provider and remote id.
    Read a row group at a time (memory stays flat whatever the ledger's size). No file: none."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from relaybatch.costs.ledger.rows import CHARGED, REUSED

    if not ledger.is_file() or not item_keys:
        return {}
    keys, outcomes = pa.array(list(item_keys)), pa.array([CHARGED, REUSED])
    columns = ["item_key", "call", "model", "provider", "remote_id", "outcome", "charged_at"]
    found: dict[str, dict[str, Any]] = {}
    latest: dict[str, Any] = {}
    for batch in pq.ParquetFile(ledger).iter_batches(columns=columns):
        mask = pc.and_(pc.is_in(batch.column("item_key"), keys), pc.is_in(batch.column("outcome"), outcomes))
        for row in batch.filter(mask).to_pylist():
            key = row["item_key"]
            if key in latest and row["charged_at"] < latest[key]:
                continue
            latest[key] = row["charged_at"]
            found[key] = {name: row[name] for name in ("model", "provider", "remote_id")} | {
                "call": str(row["call"])
            }
    return found
