"""Scale-out: one manifest as N shard flow runs, then one merged result set.

Each shard is a separate ``run-manifest`` flow run with ``shard="i/N"``. With a deployment name
the shards go through Prefect (``run_deployment``), so workers of a work pool, on any machine
that sees the shared runs folder, pick them up; without one they run as concurrent subflows of
this flow, in this process. Either way the merge step then folds the shards' stores into the
run's own store and exports the run's results from it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import flow
from prefect.deployments.flow_runs import arun_deployment
from relaybatch.flows.run_manifest import RunOutcome, budget_notes, run_manifest, run_paths, spend_note
from relaybatch.flows.summary import publish_summary
from relaybatch.tasks import merge_shards

from relaybatch.costs.report import store_folders
from relaybatch.errors import UserError
from relaybatch.manifests import run_name_for
from relaybatch.run import counts as counts_of
from relaybatch.run import spend_lines


def shard_parameters(
    manifest: Path,
    shards: int,
    runs_dir: Path | None,
    base_url: str | None,
    shared_limit_rpm: int | None,
) -> list[dict[str, object]]:
    """The ``run-manifest`` parameters of each shard (JSON-ready: they travel to workers)."""
    return [
        {
            "manifest": str(manifest),
            "runs_dir": str(runs_dir) if runs_dir else None,
            "base_url": base_url,
            "shard": f"{index}/{shards}",
            "shared_limit_rpm": shared_limit_rpm,
        }
        for index in range(1, shards + 1)
    ]


async def _through_deployment(deployment: str, parameters: list[dict[str, object]]) -> int:
    runs = await asyncio.gather(
        *(arun_deployment(deployment, parameters=values, as_subflow=True) for values in parameters)
    )
    failed = [run.name for run in runs if run.state is None or not run.state.is_completed()]
    if failed:
        raise UserError(f"shard flow runs did not complete: {', '.join(failed)}; run again to resume")
    return 0


async def _in_process(
    manifest: Path,
    shards: int,
    runs_dir: Path | None,
    base_url: str | None,
    shared_limit_rpm: int | None,
) -> int:
    outcomes = await asyncio.gather(
        *(
            run_manifest(
                manifest,
                runs_dir=runs_dir,
                base_url=base_url,
                shard=f"{index}/{shards}",
                shared_limit_rpm=shared_limit_rpm,
            )
            for index in range(1, shards + 1)
        )
    )
    # A shard stopped by a signal ends Cancelled; only finished shards' outcomes count here.
    return sum(outcome.added for outcome in outcomes if isinstance(outcome, RunOutcome))


@flow(name="run-sharded", persist_result=False)
async def run_sharded(
    manifest: Path,
    shards: int,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    deployment: str | None = None,
    shared_limit_rpm: int | None = None,
) -> RunOutcome:
    """Run a manifest as ``shards`` flow runs (through ``deployment`` when given) and merge them."""
    if shards < 1:
        raise UserError(f"shards must be at least 1, got {shards}")
    if deployment:
        parameters = shard_parameters(manifest, shards, runs_dir, base_url, shared_limit_rpm)
        added = await _through_deployment(deployment, parameters)
    else:
        added = await _in_process(manifest, shards, runs_dir, base_url, shared_limit_rpm)
    run = run_paths(runs_dir, run_name_for(manifest), None)
    results = merge_shards(run, shards)  # the shard stores folded into the run's own store
    checkpoints = [run.checkpoint]
    counts = counts_of(checkpoints)
    await publish_summary(
        run.root.name,
        checkpoints,
        counts,
        spend_lines(store_folders(run.root)),  # the run's ledger and each shard's
        results,
        notes=[
            f"merged from {shards} shards under {run.root / 'shards'}",
            spend_note(run.root),  # a shard run again may execute by now
            *budget_notes(run),
        ],
    )
    return RunOutcome(run_dir=run.root, added=added, counts=counts, results=results)
