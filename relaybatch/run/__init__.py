"""The run layer: planning a manifest into a run's folder, assembling an execution, shards, and
read-only views. Prefect-free: the CLI, the Python API, the Prefect tasks and the benchmarks call it.

Its modules are internal (code outside imports this face): ``assemble.py`` (plan, open an
execution), ``execution.py`` (execute, export, run locally), ``stopping.py`` (signals),
``locking.py`` (one writer per store), ``sharding.py`` and ``partitions.py``, ``fingerprint.py``
and ``identity.py`` (what a plan read, which manifest a run is), ``reuse.py``, ``retry.py``,
``cancel.py``, ``snapshot.py``, ``views.py``, ``status.py``, ``answers.py``, ``render_plan.py``.
A run's folder layout is ``relaybatch.run_folder``, below the engine."""

from relaybatch.run.assemble import (
    Entry,
    ExecuteResult,
    OpenRun,
    PlannedRun,
    RunOverrides,
    fold_shards,
    open_run,
    plan_run,
    refused_before_sending,
    result_of,
    run_limiter,
    stored_settings,
)
from relaybatch.run.execution import (
    LiveLimit,
    RunOutcome,
    execute_run,
    export_run_results,
    rebuild_run_exports,
    run_locally,
)
from relaybatch.run.locking import RunBusy, executing, holder_of
from relaybatch.run.sharding import Shard, merge_shard_results, shard_count_on_disk, shard_folders
from relaybatch.run.views import (
    Failure,
    SpendLine,
    counts,
    counts_per_job,
    errors_by_type,
    failures,
    items_per_job_and_state,
    spend_lines,
    total_spend,
)
from relaybatch.run_folder import RunPaths
from relaybatch.settings import run_paths, runs_dir_or_default

__all__ = [
    "Entry",
    "ExecuteResult",
    "Failure",
    "LiveLimit",
    "OpenRun",
    "PlannedRun",
    "RunBusy",
    "RunOutcome",
    "RunOverrides",
    "RunPaths",
    "Shard",
    "SpendLine",
    "counts",
    "counts_per_job",
    "errors_by_type",
    "execute_run",
    "executing",
    "export_run_results",
    "failures",
    "fold_shards",
    "holder_of",
    "items_per_job_and_state",
    "merge_shard_results",
    "open_run",
    "plan_run",
    "rebuild_run_exports",
    "refused_before_sending",
    "result_of",
    "run_limiter",
    "run_locally",
    "run_paths",
    "runs_dir_or_default",
    "shard_count_on_disk",
    "shard_folders",
    "spend_lines",
    "stored_settings",
    "total_spend",
]
