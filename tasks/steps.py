"""The coarse steps of a run, each a Prefect task over one call of the run layer (relaybatch.run).

A task here covers a whole run (or one shard of it): the engine fans out inside with asyncio.
None of these tasks has Prefect retries: the gateway client retries individual calls, and a
retried ``execute`` could resubmit billed work. A re-run of the flow is the safe retry, because
the checkpoint store knows what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from relaybatch.engine import CheckpointStore, export_results, progress_for
from relaybatch.errors import UserError
from relaybatch.run import (
    ExecuteResult,
    PlannedRun,
    RunPaths,
    Shard,
    merge_shard_results,
    open_run,
    plan_run,
    refused_before_sending,
    result_of,
)
from relaybatch.settings import Settings
from relaybatch.shared_limit import SharedLimit

# After a cancellation the engine stops submitting and lets requests in flight finish (and
# cancels remote videos when asked); Prefect's runner waits about 30 s before killing the process.
STOP_GRACE_SECONDS = 20.0


@task(name="plan", persist_result=False, cache_policy=NO_CACHE, retries=0)
def plan_items(manifest_path: Path, runs_dir: Path | None = None, shard: Shard | None = None) -> PlannedRun:
    """Validate the manifest and add its new items (this shard's only) to the store, streaming."""
    return plan_run(manifest_path, runs_dir, shard)


class _Termination:
    """Whether SIGTERM arrived during execute, and the handler it was meant for."""

    def __init__(self, previous: Any) -> None:
        self.received = False
        self.previous = previous

    def pass_on(self) -> None:
        """Deliver the held-back SIGTERM to Prefect's handler now that the engine has stopped."""
        if self.received and callable(self.previous):
            self.previous(signal.SIGTERM, None)


@contextlib.contextmanager
def graceful_sigterm(stop: asyncio.Event, work: asyncio.Future[Any]) -> Iterator[_Termination]:
    """Hold back SIGTERM while the engine stops cleanly.

    Cancelling a deployment's flow run makes the runner send SIGTERM; Prefect's handler raises
    in the middle of the event loop, so requests in flight would end with no answer recorded and
    their items would be reported uncertain. Here SIGTERM sets the engine's stop event instead
    (no new submissions, requests in flight finish and are checkpointed, remote videos cancelled
    when asked); once the engine returns, or after STOP_GRACE_SECONDS, Prefect's own handler
    gets the signal and cancels the flow run as usual. Outside the main thread (no signals) this
    does nothing.
    """
    loop = asyncio.get_running_loop()
    termination = _Termination(signal.getsignal(signal.SIGTERM))

    def on_sigterm() -> None:
        termination.received = True
        stop.set()
        loop.call_later(STOP_GRACE_SECONDS, work.cancel)

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (RuntimeError, ValueError, NotImplementedError):
        yield _Termination(None)
        return
    try:
        yield termination
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        # remove_signal_handler leaves the default action; Prefect's handler goes back.
        previous = termination.previous
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


@task(name="execute", persist_result=False, cache_policy=NO_CACHE, retries=0)
async def execute_items(
    paths: RunPaths,
    base_url: str | None,
    shared_limit: SharedLimit | None = None,
    cancel_remote_on_stop: bool = False,
) -> ExecuteResult:
    """Send every pending item, poll remote jobs, checkpoint each answer; counts per state."""
    stop = asyncio.Event()
    try:
        async with open_run(
            paths, base_url=base_url, shared_limit=shared_limit, cancel_remote_on_stop=cancel_remote_on_stop
        ) as run:
            # A live table for a person at a terminal; a line every few seconds in logs and CI.
            work = asyncio.ensure_future(
                run.execute(stop=stop, progress=progress_for(sys.stderr, Settings().progress_every_seconds))
            )
            with graceful_sigterm(stop, work) as terminated:
                try:
                    summary = await asyncio.shield(work)
                except asyncio.CancelledError:
                    # Cancelled: stop submitting, let the requests in flight finish and be
                    # checkpointed, then let the cancellation go on.
                    stop.set()
                    with contextlib.suppress(Exception, asyncio.CancelledError, TimeoutError):
                        await asyncio.wait_for(asyncio.shield(work), STOP_GRACE_SECONDS)
                    work.cancel()
                    raise
            terminated.pass_on()
        return result_of(summary)
    except UserError as error:
        return refused_before_sending(paths, error)


@task(name="export", persist_result=False, cache_policy=NO_CACHE, retries=0)
def export_outputs(paths: RunPaths) -> list[Path]:
    """Rebuild the results Parquet files from the checkpoint store."""
    with CheckpointStore(paths.checkpoint) as store:
        return export_results(store, paths.results)


@task(name="merge-shards", persist_result=False, cache_policy=NO_CACHE, retries=0)
def merge_shards(run: RunPaths, shard_count: int) -> list[Path]:
    """One result set from every shard's results."""
    return merge_shard_results(run, shard_count)
