"""Results Parquet, one file per job, rebuilt from the checkpoint store at any time.

Each file is written in row groups of ``ROWS_PER_PART`` rows to a temporary name in the same
folder, then renamed: a reader or a crash never sees half a file. Memory stays flat on
million-item jobs: items are read in rowid order without a sort, through a small page cache
(``CheckpointStore.scanning``), and turned into Arrow columns ``CONVERT_ROWS`` at a time (Python
values are the bulky part: about 3 KB per row), which a row group gathers.

Columns are typed (result_columns.py has them and which kinds get which): carried input columns
keep their type (``input_<name>``), typed judgment answers are flattened per question
(``answer_<question>``, with ``_confidence`` and ``_probabilities`` keyed by label for choice
and score), token counts are integers, usage and tool calls are structs, the cost is an exact
decimal, timestamps are UTC timestamps.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from relaybatch.arrow_memory import RowGroupWriter, release_unused
from relaybatch.engine.result_columns import (
    NOUL_THRESHOLD,
    READER,
    TIMESTAMP_TYPE,
    Column,
    answer_columns,
    answer_values,
    columns_for,
)
from relaybatch.engine.store import CheckpointStore
from relaybatch.export_marks import is_current, marked
from relaybatch.files import replaced_atomically
from relaybatch.lean_imports import arrow_without_pandas
from relaybatch.structured import answer_fields, answer_row

arrow_without_pandas()  # the exports hand pyarrow lists, never pandas objects

ROWS_PER_PART = 10_000  # rows per row group of a results file
# Rows held as Python values at a time, then converted to Arrow. 10,000 at once (a whole row group)
# cost about 45 MB of peak memory more than 1,000 (chat items; benchmarks/RESULTS.md, issue 19
# target 2); below 1,000 the per-batch costs of the conversion begin to show.
CONVERT_ROWS = 1_000
RESULTS_EXPORT = "results"


def safe_file_name(job: str) -> str:
    """A job name as a file name: no folders, no hidden files, nothing a shell would trip on."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", job).strip("._") or "job"
    return name[:120]


# -- schema ------------------------------------------------------------------------------------


def _carry_type(kinds: set[type]) -> pa.DataType:
    kinds = kinds - {type(None)}
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def _question_types(request: dict[str, Any]) -> dict[str, str]:
    questions = request.get("questions")
    if not isinstance(questions, dict):
        return {}
    return {name: str(spec.get("type")) for name, spec in questions.items() if isinstance(spec, dict)}


@dataclass(frozen=True)
class _Layout:
    """What a job's file holds: carried inputs, the kinds' columns, one group per question."""

    carried: dict[str, pa.DataType]
    columns: list[Column]
    questions: dict[str, str]
    # A structured job's output schema: its typed answer columns (relaybatch.structured.columns).
    output_schema: dict[str, Any] | None = None
    noul_threshold: float = NOUL_THRESHOLD  # a noul answer's boolean column: P(true) >= this

    @property
    def schema(self) -> pa.Schema:
        fields = [pa.field(f"input_{name}", data_type) for name, data_type in self.carried.items()]
        fields += [pa.field(column.name, column.type) for column in self.columns]
        for name, question_type in self.questions.items():
            fields += answer_columns(name, question_type)
        if self.output_schema is not None:
            fields += answer_fields(self.output_schema)
        return pa.schema(fields)


def _layout(store: CheckpointStore, job: str) -> _Layout:
    carry_kinds: dict[str, set[type]] = {}
    questions: dict[str, str] = {}
    groups: set[str] = set()
    for kind, carry, request in store.export_profile(job):
        for name, value in carry.items():
            carry_kinds.setdefault(name, set()).add(type(value))
        if kind == "judgment" and request:
            questions.update(_question_types(request))
        groups.add(READER if kind == "web_search" and request and request.get("route") == "reader" else kind)
    carried = {name: _carry_type(kinds) for name, kinds in carry_kinds.items()}
    saved = store.run_settings()
    output = (saved.get("outputs") or {}).get(job)
    schema = output.get("schema") if isinstance(output, dict) else None
    threshold = float((saved.get("noul_thresholds") or {}).get(job, NOUL_THRESHOLD))
    return _Layout(
        carried, columns_for(groups), questions, schema if isinstance(schema, dict) else None, threshold
    )


# -- rows --------------------------------------------------------------------------------------

# What a row is made of, read from the store (never the request).
_ITEM_COLUMNS = [
    "key",
    "item_id",
    "kind",
    "state",
    "carry",
    "result",
    "remote_id",
    "latency_ms",
    "limiter_wait_ms",
    "attempts",
    "last_error",
    "cost_usd",
    "submitted_at",
    "finished_at",
    "execution",
]


def _carried_value(value: Any, data_type: pa.DataType) -> Any:
    if data_type == pa.string() and value is not None and not isinstance(value, str):
        return json.dumps(value, sort_keys=True)
    return value


class _Batch:
    """Column values of up to ``CONVERT_ROWS`` rows, appended item by item (an item's decoded
    result is dropped as soon as its values are taken), turned into one record batch."""

    def __init__(self, layout: _Layout, schema: pa.Schema) -> None:
        self.layout = layout
        self.schema = schema
        self.carried = list(layout.carried.items())
        self.questions = list(layout.questions.items())
        self.values: list[list[Any]] = [[] for _ in schema]
        self.rows = 0

    def add(self, item: dict[str, Any]) -> None:
        result = item["result"] or {}
        carry = item["carry"] or {}
        row = [_carried_value(carry.get(name), data_type) for name, data_type in self.carried]
        row += [
            None if column.from_result and not result else column.value(item, result)
            for column in self.layout.columns
        ]
        answers = result.get("answers")
        if not isinstance(answers, dict):
            answers = {}
        for name, question_type in self.questions:
            row += answer_values(answers.get(name), question_type, self.layout.noul_threshold)
        if self.layout.output_schema is not None:
            row += answer_row(self.layout.output_schema, item["kind"], result)
        for column_values, value in zip(self.values, row, strict=True):
            column_values.append(value)
        self.rows += 1

    def record_batch(self) -> pa.RecordBatch:
        arrays = [_array(values, field.type) for values, field in zip(self.values, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _array(values: list[Any], data_type: pa.DataType) -> pa.Array:
    """Values as an array of ``data_type``; a value that does not fit (a gateway sending text where
    a count belongs) is written null rather than failing the whole export."""
    if data_type == TIMESTAMP_TYPE:
        return _timestamps(values)
    try:
        return pa.array(values, type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_fitting(value, data_type) for value in values], type=data_type)


def _fitting(value: Any, data_type: pa.DataType) -> Any:
    try:
        pa.array([value], type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamps(values: list[Any]) -> pa.Array:
    """The store's times as UTC timestamps, converted by Arrow in one pass: integer milliseconds
    since the epoch (layout 2), or ISO 8601 text (a store of an earlier layout, read as it is)."""
    try:
        return pa.array(values, type=TIMESTAMP_TYPE)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    try:
        return pa.array(values, type=pa.string()).cast(TIMESTAMP_TYPE)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_timestamp(value) for value in values], type=TIMESTAMP_TYPE)


def _timestamp(text: Any) -> datetime | None:
    if isinstance(text, int) and not isinstance(text, bool):
        try:
            return _EPOCH + timedelta(milliseconds=text)
        except OverflowError:
            return None
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _parts(store: CheckpointStore, job: str, layout: _Layout, schema: pa.Schema) -> Iterator[pa.Table]:
    """The job's current items in rowid order, as tables of ``ROWS_PER_PART`` rows (the last one
    shorter), each gathered from record batches of at most ``CONVERT_ROWS`` rows."""
    pending: list[pa.RecordBatch] = []
    gathered = 0
    batch = _Batch(layout, schema)
    for item in store.iter_current_items(job, columns=_ITEM_COLUMNS):
        batch.add(item)
        if batch.rows >= CONVERT_ROWS or gathered + batch.rows >= ROWS_PER_PART:
            pending.append(batch.record_batch())
            gathered += batch.rows
            batch = _Batch(layout, schema)
            if gathered >= ROWS_PER_PART:
                part, pending, gathered = pa.Table.from_batches(pending, schema), [], 0
                yield part  # held here no longer: the caller frees it once written
    if batch.rows:
        pending.append(batch.record_batch())
    if pending:
        yield pa.Table.from_batches(pending, schema)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector while batches are built, then restore it.

    A batch holds tens of thousands of small decoded dicts and lists; the collector re-scans them
    all every few hundred allocations, for nothing (they hold no cycles and are freed by reference
    counting when the batch is written). Measured with benchmarks/export_throughput.py: a quarter to
    a third of the export's CPU (chat 17-21 -> 15-16 microseconds per item; every kind 33-36 -> 25).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def export_job(store: CheckpointStore, job: str, path: Path, mark: str | None = None) -> Path:
    """Write one job's results file, part by part, under a temporary name; then rename it.

    ``mark``: the store's change mark, taken before reading it, kept in the file's footer."""
    layout = _layout(store, job)
    schema = layout.schema if mark is None else marked(layout.schema, RESULTS_EXPORT, mark)
    with (
        _no_cycle_collection(),
        replaced_atomically(path) as temporary,
        RowGroupWriter(temporary, schema) as writer,
    ):
        wrote = False
        for part in _parts(store, job, layout, schema):
            writer.write_table(part, row_group_size=ROWS_PER_PART)
            del part  # its buffers go back with the rest of what the row group freed
            release_unused()
            wrote = True
        if not wrote:
            writer.write_table(schema.empty_table())
    return path


def export_results(store: CheckpointStore, results_dir: Path, rewrite: bool = False) -> list[Path]:
    """One Parquet file per job of the current manifest, one row per item it produces (superseded
    items are kept in the store, never exported); files of jobs it no longer has are removed.

    A job's file already exported from the store as it is now (its footer carries the store's
    change mark, export_marks.py) is kept as it is: re-running a finished run rewrites nothing.
    ``rewrite``: trust no mark, write every file again (`relaybatch export`)."""
    mark = store.change_mark()  # before reading: a write meanwhile makes the next export write again
    release_unused()  # start from what is live: what the execution freed goes back first
    with store.scanning():  # every item is read once: a big page cache would only fill up
        written = []
        for job in store.jobs():
            path = results_dir / f"{safe_file_name(job)}.parquet"
            current = not rewrite and is_current(path, RESULTS_EXPORT, mark)
            written.append(path if current else export_job(store, job, path, mark))
    for old in set(results_dir.glob("*.parquet")) - set(written):
        old.unlink()
    return written
