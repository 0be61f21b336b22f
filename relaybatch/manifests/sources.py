"""Data files as streams of rows: CSV, JSONL and Parquet, one row in memory at a time.

Each row comes with its line (CSV, JSONL) or 1-based row number (Parquet), so a problem can say
exactly where it is. Parquet is read in record batches, never as a whole table.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaybatch.errors import UserError

# Rows per Parquet record batch: big enough to be fast, small enough to keep memory flat.
PARQUET_BATCH_ROWS = 4096
DATA_SUFFIXES = (".csv", ".jsonl", ".parquet")


@dataclass(frozen=True)
class Row:
    """One data row and where it came from (line for CSV/JSONL, row number for Parquet)."""

    line: int
    values: dict[str, Any]
    number: int = 0  # 1-based position among the rows: a default item id that ignores blank lines


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read (broken JSON, a line that is not an object)."""

    line: int
    message: str


def jsonable(value: Any) -> Any:
    """Values safe to store as JSON: dates and other scalars (Parquet, YAML dates) become their text.

    Sources apply it to each row once, so requests and carried values built from rows are plain JSON.
    """
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(key): jsonable(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(inner) for inner in value]
    return str(value)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Parquet cells may be dates, decimals or bytes: keep JSON types, give the others as text."""
    if all(value is None or isinstance(value, str | int | float | bool) for value in values.values()):
        return values
    plain: dict[str, Any] = jsonable(values)
    return plain


class UnreadableDataFile(UserError):
    """A data file that cannot be decoded at all: no row of it can be trusted, so nothing runs."""


def _unreadable(path: Path, error: Exception) -> UnreadableDataFile:
    if isinstance(error, UnicodeDecodeError):
        how = f"is not UTF-8 text (byte {error.start}); save it as UTF-8 and try again"
    elif path.suffix.lower() == ".parquet":
        how = f"is not a readable Parquet file ({error}); write it again with a Parquet writer"
    else:
        how = f"cannot be read ({error})"
    return UnreadableDataFile(f"{path}: {how}")


def _decoding_errors() -> tuple[type[Exception], ...]:
    import pyarrow as pa

    return (UnicodeDecodeError, pa.ArrowException, OSError)


def columns_of(path: Path) -> list[str] | None:
    """The columns every row has (CSV header, Parquet schema); None when rows may differ (JSONL)."""
    try:
        return _columns_of(path)
    except _decoding_errors() as error:
        raise _unreadable(path, error) from None


def _columns_of(path: Path) -> list[str] | None:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            return next(csv.reader(handle), [])
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    return None


def iter_rows(path: Path) -> Iterator[Row | BadRow]:
    """The rows of a data file, streamed; the suffix picks the reader.

    A file that cannot be decoded (not UTF-8, not Parquet) raises UnreadableDataFile naming it.
    """
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _reporting_decode_errors(path, _csv_rows(path))
    if suffix == ".jsonl":
        return _reporting_decode_errors(path, _jsonl_rows(path))
    if suffix == ".parquet":
        return _reporting_decode_errors(path, _parquet_rows(path))
    raise ValueError(f"unsupported data file type '{path.suffix}'; use one of {', '.join(DATA_SUFFIXES)}")


def _reporting_decode_errors(path: Path, rows: Iterator[Row | BadRow]) -> Iterator[Row | BadRow]:
    try:
        yield from rows
    except _decoding_errors() as error:
        raise _unreadable(path, error) from None


def _csv_rows(path: Path) -> Iterator[Row | BadRow]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for number, values in enumerate(reader, start=1):
            if None in values:
                yield BadRow(reader.line_num, "has more cells than the header has columns")
                continue
            yield Row(reader.line_num, dict(values), number)


def _jsonl_rows(path: Path) -> Iterator[Row | BadRow]:
    number = 0
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            number += 1
            try:
                values = json.loads(line)
            except json.JSONDecodeError as error:
                yield BadRow(line_number, f"is not valid JSON ({error.msg}); write one JSON object per line")
                continue
            if not isinstance(values, dict):
                yield BadRow(line_number, "is not a JSON object; write one object per line")
                continue
            yield Row(line_number, values, number)


def _parquet_rows(path: Path) -> Iterator[Row | BadRow]:
    import pyarrow.parquet as pq

    row_number = 0
    parquet = pq.ParquetFile(path)
    try:
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for values in batch.to_pylist():
                row_number += 1
                yield Row(row_number, _plain(values), row_number)
    finally:
        parquet.close()
