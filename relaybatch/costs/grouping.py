"""`relaybatch report --by day,model`: spend grouped by any of run, job, model, provider, kind and
day, printed as a table and written as CSV or Parquet (``--output``) for a spreadsheet or a
notebook. Money stays exact: decimal text in CSV, decimal128(38, 18) in Parquet."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from relaybatch.costs.report import GROUP_COLUMNS, RunSpend
from relaybatch.errors import UserError
from relaybatch.files import replaced_atomically

FIGURES = ("calls", "known_usd", "unknown_usd", "total_usd", "unknown_calls")
# With --output and no --by: every grouping column, so the file can be pivoted any way.
ALL = GROUP_COLUMNS


def parse_by(value: str | None) -> tuple[str, ...]:
    """``day,model`` as columns, each one of GROUP_COLUMNS (a located error otherwise)."""
    if value is None:
        return ()
    columns = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [column for column in columns if column not in GROUP_COLUMNS]
    if unknown or not columns:
        raise UserError(
            f"--by {value!r}: group by one or more of {', '.join(GROUP_COLUMNS)}, separated by commas "
            "(e.g. --by day,model)"
        )
    return columns


def grouped_rows(spend: RunSpend, columns: Sequence[str]) -> list[dict[str, Any]]:
    """One row per group: its columns, then calls, known, unknown (worst case) and total USD."""
    rows = []
    for line in spend.by(*columns):
        rows.append(
            {
                **dict(zip(columns, line.key, strict=True)),
                "calls": line.calls,
                "known_usd": line.usd,
                "unknown_usd": line.unknown_usd,
                "total_usd": line.usd + line.unknown_usd,
                "unknown_calls": line.unknown_calls,
            }
        )
    return rows


def write_grouped(rows: list[dict[str, Any]], columns: Sequence[str], path: Path) -> Path:
    """The grouped table as ``path`` (``.csv`` or ``.parquet``), written whole or not at all."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise UserError(f"--output {path}: write a .csv or a .parquet file")
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [*columns, *FIGURES]
    with replaced_atomically(path) as temporary:
        if suffix == ".csv":
            with open(temporary, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, names)
                writer.writeheader()
                writer.writerows({name: str(row[name]) for name in names} for row in rows)
        else:
            _write_parquet(rows, columns, temporary)
    return path


def _write_parquet(rows: list[dict[str, Any]], columns: Sequence[str], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from relaybatch.costs.ledger import MONEY

    fields = [pa.field(column, pa.string()) for column in columns]
    fields += [pa.field("calls", pa.int64())]
    fields += [pa.field(name, MONEY) for name in ("known_usd", "unknown_usd", "total_usd")]
    fields += [pa.field("unknown_calls", pa.int64())]
    schema = pa.schema(fields)
    arrays = []
    for field in schema:
        values = [row[field.name] for row in rows]
        if field.type == MONEY:
            arrays.append(pa.array([str(value) for value in values], pa.string()).cast(MONEY))
        else:
            arrays.append(pa.array(values, field.type))
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
