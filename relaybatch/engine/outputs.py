"""Results Parquet, rebuilt from the checkpoint store and written under a temporary name first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from relaybatch.engine.store import CheckpointStore


def _result_row(row: dict[str, Any]) -> dict[str, Any]:
    result = row["result"] or {}
    usage = result.get("usage") or {}
    return {
        **{f"input_{name}": value for name, value in row["carry"].items()},
        "item_id": row["item_id"],
        "item_key": row["key"],
        "state": row["state"],
        "output_text": result.get("output_text"),
        "finish_reason": result.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "attempts": row["attempts"],
        "error": row["last_error"],
    }


def write_parquet_atomically(table: pa.Table, path: Path) -> None:
    """Write to a temporary name in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


def export_results(store: CheckpointStore, results_dir: Path) -> list[Path]:
    """One Parquet file per job, from the store's current contents."""
    paths = []
    for job in store.jobs():
        table = pa.Table.from_pylist([_result_row(row) for row in store.iter_items(job)])
        path = results_dir / f"{job}.parquet"
        write_parquet_atomically(table, path)
        paths.append(path)
    return paths
