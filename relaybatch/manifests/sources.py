"""Data files as streams of rows: CSV, JSONL and Parquet, one row in memory at a time.

Each row comes with its line (CSV, JSONL) or 1-based row number (Parquet), so a problem can say
exactly where it is. Parquet is read in record batches, never as a whole table. Text files are read
in the encoding their byte-order mark declares (text_files.py), a line at a time up to the limit
of one request; a file that stops being readable ends in one located BadRow, never an exception.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaybatch.manifests.limits import MAX_DEPTH, MAX_REQUEST_BYTES
from relaybatch.manifests.text_files import TextFileError, bounded_lines, decode_failure, open_text

# Rows per Parquet record batch: big enough to be fast, small enough to keep memory flat.
PARQUET_BATCH_ROWS = 4096
DATA_SUFFIXES = (".csv", ".jsonl", ".parquet")
# Text tables whose appended rows can be read on their own (a Parquet file is rewritten whole).
APPENDABLE_SUFFIXES = (".csv", ".jsonl")


@dataclass(frozen=True)
class Row:
    """One data row and where it came from (line for CSV/JSONL, row number for Parquet)."""

    line: int
    values: dict[str, Any]
    number: int = 0  # 1-based position among the rows: a default item id that ignores blank lines


@dataclass(frozen=True)
class RowsFrom:
    """Where some rows of a data file begin: those appended to a CSV or JSONL file since it was
    planned, or a partition's range (relaybatch/manifests/ranges.py). For CSV and JSONL: the byte
    offset (at the start of a line) and how many lines and rows come before it; for Parquet:
    ``offset`` is the first row group and ``rows`` the rows before it. Rows read from here carry
    the same line and row numbers as a read of the whole file would give them.

    ``until`` ends a range: the last line read (CSV, JSONL) or the row group it stops before
    (Parquet); None reads to the end of the file."""

    offset: int
    lines: int
    rows: int
    until: int | None = None


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
    if isinstance(value, bytes | bytearray | memoryview):
        # A binary Parquet column (or YAML !!binary): text when it is UTF-8, else base64, which an
        # image column reads as image bytes. str() gave Python's "b'...'" as the prompt.
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")
    return str(value)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Parquet cells may be dates, decimals or bytes: keep JSON types, give the others as text."""
    if all(value is None or isinstance(value, str | int | float | bool) for value in values.values()):
        return values
    plain: dict[str, Any] = jsonable(values)
    return plain


class NestingTooDeep(ValueError):
    """JSON that nests deeper than MAX_DEPTH."""


def parse_json(text: str) -> Any:
    """JSON text to a value; raise ValueError saying what to do when it is broken or nests too deep."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"is not valid JSON ({error.msg})") from None
    except RecursionError:
        raise NestingTooDeep(_too_deep()) from None
    if nesting_depth(value) > MAX_DEPTH:
        raise NestingTooDeep(_too_deep())
    return value


def nesting_depth(value: Any) -> int:
    """How many mappings and lists deep a value goes (a scalar is 0), walked without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:  # deeper than the limit is all a caller needs to know
                inner = current.values() if isinstance(current, dict) else current
                stack.extend((child, depth + 1) for child in inner)
    return deepest


def _type_depth(arrow_type: Any) -> int:
    """How many lists and structs deep a Parquet column's type goes, walked without recursion."""
    deepest, stack = 0, [(arrow_type, 0)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            stack.extend((current.field(index).type, depth + 1) for index in range(current.num_fields))
    return deepest


def _too_deep() -> str:
    return f"nests lists or objects more than {MAX_DEPTH} levels deep; flatten it"


def columns_of(path: Path) -> list[str] | None:
    """The columns every row has (CSV header, Parquet schema); None when rows may differ (JSONL)
    or the file cannot be read (its rows then report why)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            handle, _ = open_text(path, newline="")
            with handle:
                header = next(csv.reader(bounded_lines(handle)), None)
            return header or None
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.ParquetFile(path).schema_arrow.names)
    except (TextFileError, UnicodeDecodeError, csv.Error, OSError, _arrow_error()):
        return None
    return None


def _arrow_error() -> type[Exception]:
    import pyarrow as pa

    return pa.ArrowException


def iter_rows(path: Path, start: RowsFrom | None = None) -> Iterator[Row | BadRow]:
    """The rows of a data file, streamed; the suffix picks the reader.

    A file that stops being readable (bad encoding, an endless line, not Parquet) ends in one BadRow
    naming the first line that failed; a file with no rows is one BadRow saying so. With ``start``
    only the rows from there on (those appended since the file was planned, or a partition's
    range, up to its ``until``).
    """
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _csv_rows(path, start)
    if suffix == ".jsonl":
        return _jsonl_rows(path, start)
    if suffix == ".parquet":
        return _parquet_rows(path, start)
    raise ValueError(f"unsupported data file type '{path.suffix}'; use one of {', '.join(DATA_SUFFIXES)}")


def _csv_rows(path: Path, start: RowsFrom | None = None) -> Iterator[Row | BadRow]:
    # A cell may hold a base64 image: let it be as long as one request may be (default 128 KB).
    csv.field_size_limit(max(csv.field_size_limit(), MAX_REQUEST_BYTES))
    lines_before = start.lines if start else 0
    try:
        header = _csv_header(path) if start and start.offset else None
        handle, encoding = open_text(path, newline="", offset=start.offset if start else 0)
    except TextFileError as error:
        yield BadRow(error.line, error.message)
        return
    rows_before = number = start.rows if start else 0
    with handle:
        # strict: a quote never closed is an error at the end of the file, not one cell swallowing
        # every row after it (which would silently run fewer items than the file has).
        lines = bounded_lines(handle, lines_before=lines_before)
        reader = csv.DictReader(lines, fieldnames=header, strict=True)
        last_line = lines_before  # the last line read before the row being read
        try:
            if problem := _header_problem(reader.fieldnames):
                yield BadRow(1, problem)
                return
            last_line = lines_before + reader.line_num
            for number, values in enumerate(reader, start=rows_before + 1):
                last_line = lines_before + reader.line_num
                if _past(start, last_line):
                    number -= 1
                    break
                if None in values:
                    yield BadRow(
                        last_line,
                        "has more cells than the header has columns; "
                        "quote a cell that holds a comma, or add the column",
                    )
                    continue
                yield Row(last_line, dict(values), number)
        except (UnicodeDecodeError, TextFileError) as error:
            yield _unreadable(error, path, encoding)
            return
        except csv.Error as error:
            yield BadRow(last_line + 1, _CSV_QUOTES.format(error=error))
            return
    if number == 0 and start is None:
        what = "has a header line but no rows" if reader.fieldnames else "is empty"
        yield BadRow(1, f"{what}; a data file needs a header line and at least one row")


_CSV_QUOTES = (
    "is not valid CSV ({error}) in the row that starts here; a cell that opens with a quote must end "
    'with one, and a quote inside a quoted cell is written twice ("")'
)


def _header_problem(names: Sequence[str] | None) -> str | None:
    """What is wrong with a CSV header (a column named twice, a column with no name), or None."""
    seen: set[str] = set()
    for position, name in enumerate(names or [], start=1):
        if not name.strip():
            return f"column {position} of the header has no name; name it or remove the column"
        if name in seen:
            return f"column '{name}' is named twice in the header; rename or remove one (each column is one field)"  # noqa: E501
        seen.add(name)
    return None


def _csv_header(path: Path) -> list[str] | None:
    """The header of a CSV file (its first record), read on its own."""
    handle, _ = open_text(path, newline="")
    with handle:
        return next(csv.reader(bounded_lines(handle)), None)


def _unreadable(error: UnicodeDecodeError | TextFileError, path: Path, encoding: str) -> BadRow:
    """A data file that stopped reading part-way: an undecodable byte (located by line) or a line
    past the size limit."""
    failure = decode_failure(path, encoding) if isinstance(error, UnicodeDecodeError) else error
    return BadRow(failure.line, failure.message)


def _jsonl_rows(path: Path, start: RowsFrom | None = None) -> Iterator[Row | BadRow]:
    number = start.rows if start else 0
    lines_before = start.lines if start else 0
    try:
        handle, encoding = open_text(path, offset=start.offset if start else 0)
    except TextFileError as error:
        yield BadRow(error.line, error.message)
        return
    with handle:
        try:
            lines = bounded_lines(handle, lines_before=lines_before)
            for line_number, line in enumerate(lines, start=lines_before + 1):
                if _past(start, line_number):
                    break
                if not line.strip():
                    continue
                number += 1
                try:
                    values = parse_json(line)
                except NestingTooDeep as error:
                    yield BadRow(line_number, str(error))
                    continue
                except ValueError as error:
                    yield BadRow(line_number, f"{error}; write one JSON object per line")
                    continue
                if not isinstance(values, dict):
                    yield BadRow(line_number, "is not a JSON object; write one object per line")
                    continue
                yield Row(line_number, values, number)
        except (UnicodeDecodeError, TextFileError) as error:
            yield _unreadable(error, path, encoding)
            return
    if number == 0 and start is None:
        yield BadRow(1, "is empty; write one JSON object per line")


def _past(start: RowsFrom | None, line: int) -> bool:
    """Whether ``line`` is after the end of the range being read."""
    return start is not None and start.until is not None and line > start.until


def _parquet_rows(path: Path, start: RowsFrom | None = None) -> Iterator[Row | BadRow]:
    import pyarrow.parquet as pq

    row_number = start.rows if start else 0
    try:
        parquet = pq.ParquetFile(path)
    except (_arrow_error(), OSError) as error:
        yield BadRow(1, f"is not a readable Parquet file ({error}); write it again with a Parquet writer")
        return
    for column in parquet.schema_arrow:
        if _type_depth(column.type) > MAX_DEPTH:
            parquet.close()
            yield BadRow(1, f"column '{column.name}' {_too_deep()}")
            return
    try:
        groups = None
        if start is not None:
            end = parquet.num_row_groups if start.until is None else start.until
            groups = list(range(start.offset, min(end, parquet.num_row_groups)))
        batches = (
            [] if groups == [] else parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=groups)
        )
        for batch in batches:
            for values in batch.to_pylist():
                row_number += 1
                yield Row(row_number, _plain(values), row_number)
    except (_arrow_error(), OSError) as error:
        message = f"cannot be read from here on ({error}); write the file again with a Parquet writer"
        yield BadRow(row_number + 1, message)
        return
    finally:
        parquet.close()
    if row_number == 0 and start is None:
        yield BadRow(1, "has no rows; a data file needs at least one row")
