"""Results Parquet, one file per job, rebuilt from the checkpoint store at any time.

Each file is written in row groups of ``ROWS_PER_PART`` rows (memory stays flat on million-item
jobs) to a temporary name in the same folder, then renamed: a reader or a crash never sees half
a file. Columns are typed: carried input columns keep their type (``input_<name>``), typed
judgment answers are flattened per question (``answer_<question>`` as a number for noul and
score, a string for choice, with ``_confidence`` and ``_probabilities``), token counts are
integers, the cost is an exact decimal.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from relaybatch.engine.store import CheckpointStore

ROWS_PER_PART = 10_000
COST_TYPE = pa.decimal128(38, 18)

_FIXED_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("item_id", pa.string()),
    ("item_key", pa.string()),
    ("kind", pa.string()),
    ("state", pa.string()),
    ("model", pa.string()),
    ("output_text", pa.string()),
    ("tool_calls", pa.string()),
    ("finish_reason", pa.string()),
    ("media_paths", pa.list_(pa.string())),
    ("media_urls", pa.list_(pa.string())),
    ("remote_id", pa.string()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("cached_tokens", pa.int64()),
    ("reasoning_tokens", pa.int64()),
    ("usage", pa.string()),
    ("latency_ms", pa.float64()),
    ("attempts", pa.int64()),
    ("error", pa.string()),
    ("cost_usd", COST_TYPE),
    ("finished_at", pa.string()),
]


def write_parquet_atomically(table: pa.Table, path: Path) -> None:
    """Write to a temporary name in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


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


def _schema(store: CheckpointStore, job: str) -> tuple[pa.Schema, dict[str, str]]:
    carry_kinds: dict[str, set[type]] = {}
    questions: dict[str, str] = {}
    for carry, judgment_request in store.carry_and_judgment_requests(job):
        for name, value in carry.items():
            carry_kinds.setdefault(name, set()).add(type(value))
        if judgment_request:
            questions.update(_question_types(judgment_request))
    fields = [pa.field(f"input_{name}", _carry_type(kinds)) for name, kinds in carry_kinds.items()]
    fields += [pa.field(name, data_type) for name, data_type in _FIXED_COLUMNS]
    for name, question_type in questions.items():
        answer_type = pa.string() if question_type == "choice" else pa.float64()
        fields += [
            pa.field(f"answer_{name}", answer_type),
            pa.field(f"answer_{name}_confidence", pa.float64()),
            pa.field(f"answer_{name}_probabilities", pa.string()),
        ]
    return pa.schema(fields), questions


# -- rows --------------------------------------------------------------------------------------


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _carried(carry: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    row = {}
    for name, value in carry.items():
        if (
            schema.field(f"input_{name}").type == pa.string()
            and value is not None
            and not isinstance(value, str)
        ):
            value = json.dumps(value, sort_keys=True)
        row[f"input_{name}"] = value
    return row


def _answers(result: dict[str, Any], questions: dict[str, str]) -> dict[str, Any]:
    answers = result.get("answers") or {}
    row: dict[str, Any] = {}
    for name, question_type in questions.items():
        answer = answers.get(name) or {}
        value = answer.get(question_type) if isinstance(answer, dict) else None
        row[f"answer_{name}"] = str(value) if question_type == "choice" and value is not None else value
        row[f"answer_{name}_confidence"] = answer.get("confidence") if isinstance(answer, dict) else None
        row[f"answer_{name}_probabilities"] = _json_or_none(answer.get("probabilities"))
    return row


# What result_row reads of an item.
_ITEM_COLUMNS = [
    "key",
    "item_id",
    "kind",
    "state",
    "carry",
    "result",
    "remote_id",
    "latency_ms",
    "attempts",
    "last_error",
    "cost_usd",
    "finished_at",
]


def result_row(item: dict[str, Any], schema: pa.Schema, questions: dict[str, str]) -> dict[str, Any]:
    result = item["result"] or {}
    tokens = result.get("tokens") or {}
    cost = item.get("cost_usd")
    return {
        **_carried(item["carry"], schema),
        "item_id": item["item_id"],
        "item_key": item["key"],
        "kind": item["kind"],
        "state": item["state"],
        "model": result.get("model"),
        "output_text": result.get("output_text"),
        "tool_calls": _json_or_none(result.get("tool_calls")),
        "finish_reason": result.get("finish_reason"),
        "media_paths": result.get("media_paths") or [],
        "media_urls": result.get("media_urls") or [],
        "remote_id": item.get("remote_id"),
        "input_tokens": tokens.get("input_tokens"),
        "output_tokens": tokens.get("output_tokens"),
        "cached_tokens": tokens.get("cached_tokens"),
        "reasoning_tokens": tokens.get("reasoning_tokens"),
        "usage": _json_or_none(result.get("usage")),
        "latency_ms": item.get("latency_ms"),
        "attempts": item["attempts"],
        "error": item["last_error"] if item["state"] != "done" else None,
        "cost_usd": Decimal(cost) if cost is not None else None,
        "finished_at": item.get("finished_at"),
        **_answers(result, questions),
    }


def _parts(
    store: CheckpointStore, job: str, schema: pa.Schema, questions: dict[str, str]
) -> Iterator[pa.Table]:
    rows: list[dict[str, Any]] = []
    for item in store.iter_items(job, columns=_ITEM_COLUMNS):
        rows.append(result_row(item, schema, questions))
        if len(rows) >= ROWS_PER_PART:
            yield pa.Table.from_pylist(rows, schema=schema)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=schema)


def export_job(store: CheckpointStore, job: str, path: Path) -> Path:
    """Write one job's results file, part by part, under a temporary name; then rename it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    schema, questions = _schema(store, job)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with pq.ParquetWriter(temporary, schema) as writer:
            wrote = False
            for part in _parts(store, job, schema, questions):
                writer.write_table(part)
                wrote = True
            if not wrote:
                writer.write_table(schema.empty_table())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def export_results(store: CheckpointStore, results_dir: Path) -> list[Path]:
    """One Parquet file per job, from the store's current contents."""
    for stale in results_dir.glob(".*.parquet.tmp-*") if results_dir.exists() else []:
        stale.unlink(missing_ok=True)  # left by an export that crashed half-way
    return [export_job(store, job, results_dir / f"{safe_file_name(job)}.parquet") for job in store.jobs()]
