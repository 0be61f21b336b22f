"""The run flows: run a manifest (or one shard of it), and resume a run by name.

plan -> execute (polls included) -> export -> report, each a coarse task; the engine fans out
inside execute. While execute runs, a progress artifact follows the checkpoint store; at the end
markdown and table artifacts summarise items, spend and outputs.

Cancelling a deployment's flow run makes Prefect cancel the flow's coroutine: the execute step
sets the engine's stop event (no new submissions; requests in flight finish and are
checkpointed; with ``cancel_remote_on_cancel`` remote videos still running are cancelled too),
the progress artifact gets its last update, and the ``on_cancellation`` hook logs how to resume. A crash
leaves the store as it was at the last committed transition; running the same manifest again
resumes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.client.schemas.objects import FlowRun, State
from prefect.logging.loggers import flow_run_logger
from relaybatch.flows.progress import DEFAULT_EVERY_SECONDS, progress_artifact
from relaybatch.flows.summary import publish_summary
from relaybatch.tasks import execute_items, export_outputs, plan_items

from relaybatch.costs.report import run_spend_figures
from relaybatch.costs.terminal import spend_summary
from relaybatch.run import PlannedRun, RunPaths, Shard, spend_lines
from relaybatch.run import run_paths as paths_of_run
from relaybatch.shared_limit import SharedLimit, SharedLimitSettings


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    added: int
    counts: dict[str, int]
    results: list[Path]
    # Why the engine stopped early (budget reached, key refused...); None when it ran to the end.
    stopped: str | None = None
    spent_usd: Decimal | None = None


def _log_resume_hint(flow: Any, flow_run: FlowRun, state: State) -> None:
    """Hook for cancelled and crashed runs: nothing is lost, say how to continue."""
    manifest = flow_run.parameters.get("manifest") or flow_run.parameters.get("run_name")
    flow_run_logger(flow_run, flow).warning(
        "run stopped (%s); its checkpoint keeps every item's state. Run the same manifest again "
        "(relaybatch run %s) to resume: done items are not sent again.",
        state.name,
        manifest,
    )


def run_paths(runs_dir: Path | None, run_name: str, shard: Shard | None) -> RunPaths:
    paths = paths_of_run(runs_dir, run_name)
    return shard.paths(paths) if shard else paths


def shared_limit_for(rpm: int | None) -> SharedLimit | None:
    """A flow parameter wins; otherwise RELAYBATCH_SHARED_LIMIT_RPM in the worker's environment."""
    configured = SharedLimitSettings()
    if rpm is not None:
        return SharedLimit(rpm=rpm, name=configured.name, burst=configured.burst, block=configured.block)
    return configured.shared_limit()


async def execute_and_report(
    label: str,
    paths: RunPaths,
    base_url: str | None,
    shared_limit: SharedLimit | None,
    progress_every: float,
    added: int,
    cancel_remote_on_cancel: bool,
) -> RunOutcome:
    """The part every run flow shares: execute with a progress artifact, export, summarise."""
    async with progress_artifact(paths.checkpoint, progress_every):
        result = await execute_items(paths, base_url, shared_limit, cancel_remote_on_cancel)
    results = export_outputs(paths)
    outputs = results + [path for path in (paths.ledger,) if path.exists()]
    notes = [f"stopped early: {result.stopped}"] if result.stopped else []
    notes.append(f"spend: {spend_summary(run_spend_figures(paths.root))}")
    await publish_summary(
        label, [paths.checkpoint], result.counts, spend_lines([paths.checkpoint]), outputs, notes
    )
    return RunOutcome(
        run_dir=paths.root,
        added=added,
        counts=result.counts,
        results=results,
        stopped=result.stopped,
        spent_usd=result.spent_usd,
    )


@flow(
    name="run-manifest",
    persist_result=False,
    on_cancellation=[_log_resume_hint],
    on_crashed=[_log_resume_hint],
)
async def run_manifest(
    manifest: Path,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    shard: str | None = None,
    shared_limit_rpm: int | None = None,
    progress_every: float = DEFAULT_EVERY_SECONDS,
    cancel_remote_on_cancel: bool = False,
    planned: PlannedRun | None = None,
) -> RunOutcome:
    """Run (or resume) a manifest, or one shard of it (``shard="1/2"``): done items are not sent again.

    ``planned``: the caller already planned the manifest into its store (the CLI does, before
    Prefect starts, so the manifest is opened once); otherwise the plan step does it here.
    """
    # The API key is never a flow parameter (Prefect stores those): settings read it from the
    # environment inside the process that sends requests.
    if planned is None:
        planned = plan_items(manifest, runs_dir, Shard.parse(shard) if shard else None)
    return await execute_and_report(
        planned.label,
        planned.paths,
        base_url,
        shared_limit_for(shared_limit_rpm),
        progress_every,
        planned.added,
        cancel_remote_on_cancel,
    )


@flow(
    name="resume-run",
    persist_result=False,
    on_cancellation=[_log_resume_hint],
    on_crashed=[_log_resume_hint],
)
async def resume_run(
    run_name: str,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    shard: str | None = None,
    shared_limit_rpm: int | None = None,
    progress_every: float = DEFAULT_EVERY_SECONDS,
    cancel_remote_on_cancel: bool = False,
) -> RunOutcome:
    """Finish an existing run from its checkpoint alone (the manifest is not read again)."""
    part = Shard.parse(shard) if shard else None
    paths = run_paths(runs_dir, run_name, part).require_existing()
    label = f"{run_name} shard {part}" if part else run_name
    return await execute_and_report(
        label,
        paths,
        base_url,
        shared_limit_for(shared_limit_rpm),
        progress_every,
        0,
        cancel_remote_on_cancel,
    )
