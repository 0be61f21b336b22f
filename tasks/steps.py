"""The coarse steps of a run, each a Prefect task over one call of the run layer (relaybatch.run).

A task here covers a whole run (or one shard of it): the engine fans out inside with asyncio.
None of these tasks has Prefect retries: the gateway client retries individual calls, and a
retried ``execute`` could resubmit billed work. A re-run of the flow is the safe retry, because
the checkpoint store knows what was sent. Stopping on SIGINT/SIGTERM (a cancelled deployment run
gets SIGTERM from its runner) is the run layer's own (relaybatch/run/stopping.py).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from relaybatch.run import (
    Entry,
    ExecuteResult,
    LiveLimit,
    PlannedRun,
    RunPaths,
    Shard,
    execute_run,
    export_run_results,
    merge_shard_results,
    plan_run,
    rebuild_run_exports,
)
from relaybatch.run.partitions import Partition, plan_partition
from relaybatch.shared_limit import SharedLimit


@task(name="plan", persist_result=False, cache_policy=NO_CACHE, retries=0)
def plan_items(
    manifest_path: Path,
    runs_dir: Path | None = None,
    shard: Shard | None = None,
    hold: contextlib.ExitStack | None = None,
) -> PlannedRun:
    """Validate the manifest and add its new items (this shard's only) to the store, streaming.

    ``hold``: the store's lock stays held until the flow closes it (plan to export, one writer)."""
    return plan_run(manifest_path, runs_dir, shard, hold=hold)


@task(name="plan-partition", persist_result=False, cache_policy=NO_CACHE, retries=0)
def plan_partition_items(
    manifest_path: Path,
    runs_dir: Path | None,
    partition: str,
    hold: contextlib.ExitStack | None = None,
) -> PlannedRun:
    """Validate and plan one partition's rows only (``"3/12"`` of the run's prepared split)."""
    index, count = Partition.parse(partition)
    planned: PlannedRun = plan_partition(manifest_path, runs_dir, index, count, hold=hold)
    return planned


@task(name="execute", persist_result=False, cache_policy=NO_CACHE, retries=0)
async def execute_items(
    paths: RunPaths,
    base_url: str | None,
    shared_limit: SharedLimit | None = None,
    cancel_remote_on_stop: bool = False,
    entry: Entry | None = None,
    live_limit: LiveLimit | None = None,
) -> ExecuteResult:
    """Send every pending item, poll remote jobs, checkpoint each answer; counts per state. The
    flow holds the store's lock (``executing``) from its plan to its export."""
    return await execute_run(
        paths, base_url, shared_limit, cancel_remote_on_stop, entry=entry, live_limit=live_limit
    )


@task(name="export", persist_result=False, cache_policy=NO_CACHE, retries=0)
def export_outputs(paths: RunPaths, rebuild: bool = False) -> list[Path]:
    """The results Parquet files from the checkpoint store (``rebuild``: and the cost ledger, every
    file written again, also one edited in place; else a file of the store as it is is kept)."""
    return rebuild_run_exports(paths) if rebuild else export_run_results(paths)


@task(name="merge-shards", persist_result=False, cache_policy=NO_CACHE, retries=0)
def merge_shards(run: RunPaths, shard_count: int) -> list[Path]:
    """One result set from every shard's results."""
    return merge_shard_results(run, shard_count)
