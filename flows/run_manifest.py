"""The run flows: run a manifest (or one shard of it), and resume a run by name.

plan -> execute (polls included) -> export -> report, each a coarse task; the engine fans out
inside execute. While execute runs, a progress artifact follows the checkpoint store; at the end
markdown and table artifacts summarise items, spend and outputs.

Ctrl-C, SIGTERM and cancelling a deployment's flow run (its runner sends SIGTERM) stop the
execute step cleanly (relaybatch/run/stopping.py: no new submissions; requests in flight finish
and are checkpointed; with ``cancel_remote_on_cancel`` remote videos still running are cancelled
too); the progress artifact gets its last update and the flow run ends Cancelled, and the
``on_cancellation`` hook logs how to resume. A flow run started by a deployment prints one line
when it starts and one when it ends (a worker or `relaybatch serve` shows them). A crash
leaves the store as it was at the last committed transition; running the same manifest again
resumes it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.client.schemas.objects import FlowRun, State
from prefect.logging.loggers import flow_run_logger
from prefect.states import Cancelled
from relaybatch.flows.catch_up import SKIPPED, CatchUp, hold_or_skip
from relaybatch.flows.progress import DEFAULT_EVERY_SECONDS, progress_artifact, read_progress
from relaybatch.flows.summary import publish_summary
from relaybatch.tasks import execute_items, export_outputs, plan_items, plan_partition_items

from relaybatch.costs.report import run_spend_figures
from relaybatch.costs.terminal import budget_summary, run_budget_uses, spend_summary
from relaybatch.manifests import run_name_for
from relaybatch.run import (
    Entry,
    ExecuteResult,
    PlannedRun,
    RunOutcome,
    RunPaths,
    Shard,
    executing,
    spend_lines,
)
from relaybatch.run import run_paths as paths_of_run
from relaybatch.run.executions import execution_figures, execution_usd
from relaybatch.run.locking import refreshing_ledger
from relaybatch.run.partitions import Partition
from relaybatch.run.stopping import stop_when_parent_dies
from relaybatch.settings import entry_settings
from relaybatch.shared_limit import SharedLimit, SharedLimitSettings

__all__ = ["RunOutcome", "resume_run", "run_manifest"]


def _paths_of(flow_run: FlowRun) -> RunPaths | None:
    """The run folder a run-manifest or resume-run flow run works on, from its parameters."""
    values = flow_run.parameters
    manifest = values.get("manifest")
    name = values.get("run_name") or (run_name_for(Path(manifest)) if manifest else None)
    if not name:
        return None
    shard = values.get("shard")
    runs_dir = values.get("runs_dir")
    paths = run_paths(Path(runs_dir) if runs_dir else None, name, Shard.parse(shard) if shard else None)
    if values.get("partition"):
        index, count = Partition.parse(str(values["partition"]))
        return Partition(index, count).paths(paths)
    return paths


def _stop_with_the_runner() -> None:
    """A deployment's flow run stops (cleanly, as on SIGTERM) when the runner or worker that
    started it dies, even by SIGKILL: no flow-run process outlives it by more than a few seconds."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is not None and context.flow_run is not None and context.flow_run.deployment_id:
        stop_when_parent_dies()


def _announce(text: str) -> None:
    # A flow-run process's stdout is what a worker or `relaybatch serve` shows for it.
    print(text, flush=True)


def _announce_start(flow: Any, flow_run: FlowRun, state: State) -> None:
    """One line when a deployment's flow run starts (`relaybatch run` prints its own lines)."""
    if flow_run.deployment_id is None:
        return
    paths = _paths_of(flow_run)
    _announce(f"flow run {flow_run.name}: started ({flow.name}, run folder {paths.root if paths else '?'})")


def _announce_end(flow: Any, flow_run: FlowRun, state: State) -> None:
    """One line when a deployment's flow run ends: its state, what this execution did and spent
    (new, sent, done, failed, spent), then the run's items per state and spend so far."""
    if flow_run.deployment_id is None:
        return
    if state.name == SKIPPED:  # busy, or caught up by another execution: said in one line
        _announce(f"flow run {flow_run.name}: {state.message} ({flow.name})")
        return
    paths = _paths_of(flow_run)
    detail = "no run folder"
    if paths is not None and paths.checkpoint.exists():
        view = read_progress(paths.checkpoint)
        items = ", ".join(f"{name} {count}" for name, count in sorted(view.counts.items()))
        mine = execution_figures(paths.root, label=flow_run.name)
        this = f"{mine.line()}; " if mine is not None else "no execution of its own; "
        detail = f"{this}run: items: {items or 'none'}; spent {execution_usd(view.spent)} USD"
    _announce(f"flow run {flow_run.name}: {state.name.lower()} ({flow.name}); {detail}")


def _entry() -> Entry:
    """What started this flow run, for the run's executions table: a schedule, a deployment run by
    hand, or a flow called directly (`relaybatch run` with a server); its name there."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    flow_run = context.flow_run if context is not None else None
    if flow_run is None:
        return Entry("flow")
    if flow_run.deployment_id is None:
        return Entry("flow", flow_run.name)
    return Entry("schedule" if flow_run.auto_scheduled else "deployment", flow_run.name)


def _log_resume_hint(flow: Any, flow_run: FlowRun, state: State) -> None:
    """Hook for cancelled and crashed runs: nothing is lost, say how to continue."""
    manifest = flow_run.parameters.get("manifest") or flow_run.parameters.get("run_name")
    flow_run_logger(flow_run, flow).warning(
        "run stopped (%s); its checkpoint keeps every item's state. Run the same manifest again "
        "(relaybatch run %s) to resume: done items are not sent again.",
        state.name,
        manifest,
    )


def budget_notes(paths: RunPaths) -> list[str]:
    """The run's budgets beside its spend, for the summary: a budget counts the whole run, so a
    shard's summary shows the whole run's. Read only: the summary's spend line (``spend_note``)
    refreshes the ledgers it may, each under its folder's lock."""
    whole = run_spend_figures(paths.run_root, export=False)
    uses = run_budget_uses(whole, [paths.run_root])
    if not uses:
        return []
    scope = "budgets (the whole run, every shard)" if paths.run_root != paths.root else "budgets"
    return [f"{scope}: {budget_summary(uses)}"]


def spend_note(root: Path) -> str:
    """The summary's spend line for the store folder ``root`` (a run's: its shards' too), each
    folder's ledger Parquet refreshed first under that folder's lock, as `relaybatch report` does:
    the execution has let go of its own lock by now, and a shard (or a report, an export) may hold
    one; a folder held is read as it stands and its ledger left to its holder."""
    return f"spend: {spend_summary(run_spend_figures(root, guard=refreshing_ledger))}"


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
    timings: dict[str, float] | None = None,
) -> RunOutcome | State[Any]:
    """The part every run flow shares: execute with a progress artifact, export, summarise.

    A run stopped by a signal (Ctrl-C, SIGTERM, a cancellation from the UI) ends Cancelled, with
    the outcome as its data, so the UI tells it apart from a crash or a finished run.
    """
    timings = dict(timings or {})
    started = time.monotonic()
    # The caller holds the store's lock from its plan (or, resuming, from the start) to the summary.
    async with progress_artifact(paths.checkpoint, progress_every, limit=shared_limit) as live_limit:
        result = await execute_items(
            paths, base_url, shared_limit, cancel_remote_on_cancel, _entry(), live_limit=live_limit
        )
    executed = time.monotonic()
    results = export_outputs(paths)
    timings.update({"execute": executed - started, "export": time.monotonic() - executed})
    outputs = results + [path for path in (paths.ledger,) if path.exists()]
    notes = _summary_notes(paths, result, base_url)
    await publish_summary(
        label, [paths.checkpoint], result.counts, spend_lines([paths.root]), outputs, notes, timings
    )
    outcome = RunOutcome(
        run_dir=paths.root,
        added=added,
        counts=result.counts,
        results=results,
        stopped=result.stopped,
        spent_usd=result.spent_usd,
        interrupted=result.interrupted,
        timings=timings,
        sent=result.sent,
        execution=result.execution,
    )
    if result.interrupted:
        return Cancelled(message=f"stopped by {result.interrupted}; run again to resume", data=outcome)
    return outcome


def _summary_notes(paths: RunPaths, result: ExecuteResult, base_url: str | None) -> list[str]:
    """The summary artifact's notes: why the execution stopped early, what it did and spent, the
    run's spend and budgets, and the gateway it used."""
    notes = [f"stopped early: {result.stopped}"] if result.stopped else []
    mine = None if result.execution is None else execution_figures(paths.root, result.execution)
    notes.append(f"this {mine.line()}" if mine else "this execution sent nothing (refused before sending)")
    notes.append(spend_note(paths.root))
    notes += budget_notes(paths)
    # The gateway used, also when it came from RELAYBATCH_BASE_URL in this process's environment.
    gateway = base_url or entry_settings().base_url
    notes.append(f"gateway: {gateway or 'the embedded emulator'}")
    return notes


def _run_flow_options() -> dict[str, Any]:
    """What both run flows share: no persisted result, the start/end lines and the resume hint.

    A new dict (and new hook lists) for each flow, so neither flow's options can change the other's.
    """
    return {
        "persist_result": False,
        "on_running": [_announce_start],
        "on_completion": [_announce_end],
        "on_failure": [_announce_end],
        "on_cancellation": [_log_resume_hint, _announce_end],
        "on_crashed": [_log_resume_hint, _announce_end],
    }


@flow(name="run-manifest", **_run_flow_options())
async def run_manifest(
    manifest: Path,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    shard: str | None = None,
    shared_limit_rpm: int | None = None,
    progress_every: float = DEFAULT_EVERY_SECONDS,
    cancel_remote_on_cancel: bool = False,
    planned: PlannedRun | None = None,
    partition: str | None = None,
    catch_up: CatchUp = "once",
) -> RunOutcome | State[Any]:
    """Run (or resume) a manifest, or one shard of it (``shard="1/2"``), or one partition of its
    prepared split (``partition="3/12"``: only that range of rows is read and planned): done items
    are not sent again.

    ``planned``: the caller already planned the manifest into its store (the CLI does, before
    Prefect starts, so the manifest is opened once); otherwise the plan step does it here.
    ``catch_up``: which late scheduled run executes, ``once`` or ``latest`` (flows/catch_up.py); a
    deployment's run that finds the run busy ends Skipped, not Failed.
    """
    # The API key is never a flow parameter (Prefect stores those): settings read it from the
    # environment inside the process that sends requests.
    _stop_with_the_runner()
    started = time.monotonic()
    # The store's lock from planning to the summary (run/locking.py): released between plan and
    # execute, another run of the same manifest could plan and execute in the gap; released before
    # the summary, its ledger refresh could race another execution's export. The CLI holds it too.
    with contextlib.ExitStack() as hold:
        part = Shard.parse(shard) if shard else None
        if planned is None and partition:
            planned = plan_partition_items(manifest, runs_dir, partition, hold=hold)
        elif planned is None:
            skip = hold_or_skip(hold, run_paths(runs_dir, run_name_for(Path(manifest)), part), catch_up)
            if skip is not None:
                return skip
            planned = plan_items(manifest, runs_dir, part, hold=hold)
        timings = {"plan": time.monotonic() - started}
        return await execute_and_report(
            planned.label,
            planned.paths,
            base_url,
            shared_limit_for(shared_limit_rpm),
            progress_every,
            planned.added,
            cancel_remote_on_cancel,
            timings,
        )


@flow(name="resume-run", **_run_flow_options())
async def resume_run(
    run_name: str,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    shard: str | None = None,
    shared_limit_rpm: int | None = None,
    progress_every: float = DEFAULT_EVERY_SECONDS,
    cancel_remote_on_cancel: bool = False,
    catch_up: CatchUp = "once",
) -> RunOutcome | State[Any]:
    """Finish an existing run from its checkpoint alone (the manifest is not read again)."""
    _stop_with_the_runner()
    part = Shard.parse(shard) if shard else None
    paths = run_paths(runs_dir, run_name, part).require_existing()
    label = f"{run_name} shard {part}" if part else run_name
    # Held to the end of the summary, whose spend figures refresh the ledgers (run/locking.py).
    with contextlib.ExitStack() as hold:
        skip = hold_or_skip(hold, paths, catch_up)
        if skip is not None:
            return skip
        hold.enter_context(executing(paths))
        return await execute_and_report(
            label,
            paths,
            base_url,
            shared_limit_for(shared_limit_rpm),
            progress_every,
            0,
            cancel_remote_on_cancel,
        )
