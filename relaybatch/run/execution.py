"""Executing a run, free of Prefect: the execute step with its stop on signals, and a whole run
(plan -> execute -> export) for `relaybatch run` when no Prefect server is configured.

With no server, `relaybatch run` calls ``run_locally``: no temporary Prefect server and no Prefect
import, so a run starts in about a second (docs/prefect.md). The Prefect tasks (tasks/steps.py)
wrap ``execute_run`` and the flows add the UI's artifacts around the same steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    ProgressReporter,
    RunSummary,
    export_results,
    progress_for,
)
from relaybatch.errors import UserError
from relaybatch.run.assemble import (
    Entry,
    ExecuteResult,
    OpenRun,
    PlannedRun,
    open_run,
    plan_run,
    refused_before_sending,
    result_of,
)
from relaybatch.run.locking import exporting, require_executing
from relaybatch.run.progress_file import ProgressFile
from relaybatch.run.sharding import Shard
from relaybatch.run.stopping import InterruptRelay, StopOnSignal, interrupt_at_once, stop_on_signals
from relaybatch.run_folder import RunPaths

if TYPE_CHECKING:
    from relaybatch.settings import Settings
    from relaybatch.shared_limit import SharedLimit

STOPPED_AT_ONCE = (
    "stopped at once ({why}): requests that were in flight may have been billed; a resume reports them "
    "uncertain and does not resend them"
)


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    added: int
    counts: dict[str, int]
    results: list[Path]
    # Why the engine stopped early (budget reached, key refused, a signal); None when it ran to the end.
    stopped: str | None = None
    spent_usd: Decimal | None = None
    # The signal (SIGINT, SIGTERM) that stopped the run; `relaybatch run` exits 130 then.
    interrupted: str | None = None
    # Seconds spent in each step (plan, execute, export).
    timings: dict[str, float] = field(default_factory=dict)
    sent: int = 0  # requests this execution sent (billed creates; polls not counted)
    execution: int | None = None  # its id in the run's store (relaybatch status --execution ID)


class _SendCount:
    """Billed requests this execution sent (the engine's ``sending_committed`` hook point)."""

    def __init__(self) -> None:
        self.count = 0

    def hook(self, point: str, key: str) -> None:
        if point == "sending_committed":
            self.count += 1


class LiveLimit:
    """The request limit an execution in this process uses now, for whoever shows it beside the
    run (the Prefect progress artifact, flows/progress.py): handed to ``execute_run``, which
    attaches its limiter while the engine runs. None before and after, or while no limit is known
    (the limit the bucket learned from the gateway's headers)."""

    def __init__(self) -> None:
        self._bucket: AdaptiveTokenBucket | None = None

    @property
    def requests_per_minute(self) -> float | None:
        return None if self._bucket is None else self._bucket.requests_per_minute

    @contextlib.contextmanager
    def following(self, bucket: AdaptiveTokenBucket) -> Iterator[None]:
        self._bucket = bucket
        try:
            yield
        finally:
            self._bucket = None


@dataclass(frozen=True)
class _Ended:
    """How the engine's work ended when it ended by itself (not stopped at once)."""

    summary: RunSummary
    signal: str | None  # the signal that asked it to stop, if one did
    execution: int | None


async def execute_run(
    paths: RunPaths,
    base_url: str | None,
    shared_limit: SharedLimit | None = None,
    cancel_remote_on_stop: bool = False,
    progress: ProgressReporter | None = None,
    relay: InterruptRelay | None = None,
    settings: Settings | None = None,
    entry: Entry | None = None,
    live_limit: LiveLimit | None = None,
) -> ExecuteResult:
    """Send every pending item, poll remote jobs, checkpoint each answer; counts per state.

    The caller holds the store's execution lock (``run.locking.executing``): whoever plans takes
    it once and keeps it to the export (``plan_run(hold=)``); a resume without a plan takes it
    itself. SIGINT and SIGTERM stop it cleanly (relaybatch/run/stopping.py); the result says which
    signal it was. A cancellation from outside (Prefect cancelling the flow's coroutine) stops the
    engine the same way before the cancellation goes on. ``progress``: where progress goes
    (default: a live table on a terminal, log lines elsewhere); ``relay``: Ctrl-C caught by another
    thread; ``settings``: the entry point's (built here from ``base_url`` when not given);
    ``entry``: what started this execution (the run's ``executions`` table records it);
    ``live_limit``: shows the limit in use while the engine runs.
    """
    from relaybatch.settings import entry_settings

    require_executing(paths)
    settings = settings or entry_settings(base_url=base_url)
    try:
        async with open_run(
            paths,
            base_url=base_url,
            shared_limit=shared_limit,
            cancel_remote_on_stop=cancel_remote_on_stop,
            settings=settings,
            entry=entry,
        ) as run:
            with _watched(run, paths.name, settings, progress, live_limit) as (watched, shown):
                ended = await _until_stopped(watched, shown, settings, relay)
    except UserError as error:
        return refused_before_sending(paths, error)
    return ended if isinstance(ended, ExecuteResult) else _outcome(ended)


@contextlib.contextmanager
def _watched(
    run: OpenRun,
    name: str,
    settings: Settings,
    progress: ProgressReporter | None,
    live_limit: LiveLimit | None,
) -> Iterator[tuple[OpenRun, ProgressReporter]]:
    """The open run as this execution watches it, and where its progress goes: telemetry's spans
    around each billed request and gauges from progress (when configured), the limiter shown to
    ``live_limit`` while the block runs."""
    from relaybatch.telemetry import open_telemetry

    telemetry = open_telemetry(run.store.run_name() or name, settings.telemetry)
    with contextlib.ExitStack() as watching:
        if telemetry is not None:
            watching.callback(telemetry.close)
        if live_limit is not None:
            watching.enter_context(live_limit.following(run.bucket))
        # A live table for a person at a terminal; a line every few seconds in logs and CI.
        if progress is None:
            progress = progress_for(sys.stderr, settings.progress_every_seconds)
        if telemetry is not None:
            run = dataclasses.replace(run, guard=telemetry.watch_spend(run.guard))
            progress = telemetry.watch_progress(progress)
        # The store folder's progress file, for `relaybatch status` on any host (run/progress_file.py).
        yield run, ProgressFile(progress, RunPaths(run.store.path.parent), store=run.store)


async def _until_stopped(
    run: OpenRun, progress: ProgressReporter, settings: Settings, relay: InterruptRelay | None
) -> ExecuteResult | _Ended:
    """The engine's work to its end, or to a stop: a first signal stops it cleanly (it ends by
    itself, resumable); a second one, or the grace period running out, stops it at once (the
    result is then final: ``_stopped_at_once``); a cancellation from outside lets the requests in
    flight finish (bounded) and goes on."""
    execution = run.store.execution  # its id (the store forgets it when the execution ends)
    stop = asyncio.Event()
    sends = _SendCount()  # a stop at once has no summary: the count survives it
    work = asyncio.ensure_future(run.execute(stop=stop, progress=progress, hook=sends.hook))
    with stop_on_signals(stop, work, grace=settings.stop_grace_seconds, relay=relay) as signalled:
        try:
            summary = await asyncio.shield(work)
        except asyncio.CancelledError:
            if signalled.forced:
                return _stopped_at_once(run, execution, sends.count, signalled)
            # Cancelled from outside: stop submitting, let the requests in flight finish and be
            # checkpointed (bounded), then let the cancellation go on.
            stop.set()
            with contextlib.suppress(Exception, asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(work), settings.stop_grace_seconds)
            work.cancel()
            raise
    if signalled.signal is not None and summary.stopped is not None:
        # A million items' exports take half a minute: say what the wait is for.
        print(
            f"stopped ({signalled.signal}): writing the cost ledger and the results before "
            "leaving (Ctrl-C again to leave them to the next run or `relaybatch export`)",
            file=sys.stderr,
            flush=True,
        )
    return _Ended(summary, signalled.signal, execution)


def _stopped_at_once(
    run: OpenRun, execution: int | None, sent: int, signalled: StopOnSignal
) -> ExecuteResult:
    """Stopped at once (a second signal, or the grace period ran out): what was in flight stays
    ``sending`` and is reported uncertain on resume. Recorded, so ``status`` says so rather than
    "its process died"."""
    stopped = STOPPED_AT_ONCE.format(why=signalled.forced_by)
    run.store.record_stop(stopped, sent=sent)
    return ExecuteResult(run.store.count_by_state(), stopped, None, sent, signalled.signal, execution)


def _outcome(ended: _Ended) -> ExecuteResult:
    """The execution's result once its run is closed (the ledger written): interrupted by the
    signal that stopped it, if one did."""
    if ended.signal is not None and ended.summary.stopped is None:
        # The signal came after the engine's last answer: it stopped nothing, the run is
        # complete, and it ends as a finished run (before: "stopped by SIGINT: None", 130).
        print(
            f"{ended.signal} came after the last answer was checkpointed: nothing was left "
            "to stop; writing the results (Ctrl-C again to leave that to the next run)",
            file=sys.stderr,
            flush=True,
        )
        return result_of(ended.summary, ended.execution)
    return dataclasses.replace(result_of(ended.summary, ended.execution), interrupted=ended.signal)


def export_run_results(paths: RunPaths, rewrite: bool = False) -> list[Path]:
    """The results Parquet files from the checkpoint store; a job's file already exported from
    the store as it is now is kept (export_marks.py), unless ``rewrite``."""
    with exporting(paths), CheckpointStore(paths.checkpoint) as store:
        return export_results(store, paths.results, rewrite=rewrite)


def rebuild_run_exports(paths: RunPaths) -> list[Path]:
    """Every export of the store at ``paths`` written again, the results Parquet files and the cost
    ledger, trusting no file's mark: what `relaybatch export` does for a user whose files were
    deleted, edited or copied over (a no-op run keeps a file whose footer carries the store's mark,
    and an edit in place can keep that footer)."""
    from relaybatch.costs import CostStore, write_ledger

    with exporting(paths):
        results = export_run_results(paths, rewrite=True)
        if paths.cost_store.exists():
            costs = CostStore(paths.cost_store)
            try:
                write_ledger(costs, paths.ledger, rewrite=True)
            finally:
                costs.close()
    return results


async def run_locally(
    manifest: Path,
    runs_dir: Path | None = None,
    base_url: str | None = None,
    shard: Shard | None = None,
    planned: PlannedRun | None = None,
    progress: ProgressReporter | None = None,
    relay: InterruptRelay | None = None,
    settings: Settings | None = None,
) -> RunOutcome:
    """Run (or resume) a manifest in this process, with no Prefect at all (``progress`` and
    ``relay``: as ``execute_run``'s)."""
    started = time.monotonic()
    # The store's lock, from planning to export: taken by the plan (here, or by the caller that
    # planned and holds it meanwhile), once.
    with contextlib.ExitStack() as hold:
        planned = planned or plan_run(manifest, runs_dir, shard, hold=hold)
        # A Ctrl-C once the engine has stopped (the ledger and results being written) leaves the
        # exports to the next run at once (stopping.interrupt_at_once).
        hold.enter_context(interrupt_at_once())
        planned_at = time.monotonic()
        result = await execute_run(
            planned.paths, base_url, progress=progress, relay=relay, settings=settings, entry=Entry("cli")
        )
        executed = time.monotonic()
        results = export_run_results(planned.paths)
    return RunOutcome(
        run_dir=planned.paths.root,
        added=planned.added,
        counts=result.counts,
        results=results,
        stopped=result.stopped,
        spent_usd=result.spent_usd,
        interrupted=result.interrupted,
        sent=result.sent,
        execution=result.execution,
        timings={
            "plan": planned_at - started,
            "execute": executed - planned_at,
            "export": time.monotonic() - executed,
        },
    )
