"""The coarse steps of a run, each a Prefect task wrapping one engine call."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from relaybatch.connect import open_client
from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.manifests import load_items
from relaybatch.runs import RunPaths
from relaybatch.settings import Settings

# Results stay in SQLite and Parquet; Prefect only passes small values between steps.
_TASK_OPTIONS = {"persist_result": False, "cache_policy": None}


@task(name="plan", **_TASK_OPTIONS)
def plan_items(manifest: Path, paths: RunPaths) -> int:
    """Load and validate the manifest and add its new items to the checkpoint store."""
    items = load_items(manifest)
    store = CheckpointStore(paths.checkpoint)
    try:
        return store.add_items(items)
    finally:
        store.close()


@task(name="execute", **_TASK_OPTIONS)
async def execute_items(paths: RunPaths, base_url: str | None) -> dict[str, int]:
    """Send every pending item and checkpoint each answer; returns counts per state."""
    settings = Settings(base_url=base_url) if base_url else Settings()
    store = CheckpointStore(paths.checkpoint)
    try:
        async with open_client(settings) as client:
            summary = await execute(store, client)
        return summary.counts
    finally:
        store.close()


@task(name="export", **_TASK_OPTIONS)
def export_outputs(paths: RunPaths) -> list[Path]:
    """Rebuild the results Parquet files from the checkpoint store."""
    store = CheckpointStore(paths.checkpoint)
    try:
        return export_results(store, paths.results)
    finally:
        store.close()
