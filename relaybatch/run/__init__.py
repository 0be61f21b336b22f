"""The run layer: a run's folder, planning a manifest into it, assembling an execution, shards,
and read-only views. Prefect-free: the CLI, the Prefect tasks and the benchmarks call it."""

from relaybatch.run.assemble import (
    ExecuteResult,
    OpenRun,
    PlannedRun,
    open_run,
    plan_run,
    refused_before_sending,
    result_of,
    run_limiter,
    stored_settings,
)
from relaybatch.run.paths import RunPaths, run_paths, runs_dir_or_default
from relaybatch.run.sharding import Shard, merge_shard_results, shard_count_on_disk, shard_folders
from relaybatch.run.views import (
    SpendLine,
    counts,
    counts_per_job,
    items_per_job_and_state,
    progress_of,
    read_progress,
    spend_lines,
    total_spend,
)

__all__ = [
    "ExecuteResult",
    "OpenRun",
    "PlannedRun",
    "RunPaths",
    "Shard",
    "SpendLine",
    "counts",
    "counts_per_job",
    "items_per_job_and_state",
    "merge_shard_results",
    "open_run",
    "plan_run",
    "progress_of",
    "read_progress",
    "refused_before_sending",
    "result_of",
    "run_limiter",
    "run_paths",
    "runs_dir_or_default",
    "shard_count_on_disk",
    "shard_folders",
    "spend_lines",
    "stored_settings",
    "total_spend",
]
