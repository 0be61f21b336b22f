"""The coarse steps of a run, each a Prefect task wrapping one engine call.

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
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from relaybatch.tasks.sharding import Shard, merge_shard_results

from relaybatch.connect import open_client
from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    EngineSettings,
    RichProgress,
    execute,
    export_results,
)
from relaybatch.errors import UserError
from relaybatch.limiting import Limiter
from relaybatch.manifests import open_manifest
from relaybatch.runs import RunPaths
from relaybatch.settings import Settings
from relaybatch.shared_limit import SharedLimit, open_shared_limiter

# After a cancellation the engine stops submitting and lets requests in flight finish (and
# cancels remote videos when asked); Prefect's runner waits about 30 s before killing the process.
STOP_GRACE_SECONDS = 20.0


@dataclass(frozen=True)
class ExecuteResult:
    counts: dict[str, int]
    stopped: str | None
    spent_usd: Decimal | None


def _run_settings(manifest: Any, shard: Shard | None) -> dict[str, Any]:
    """What a resumed run needs from the manifest, kept in the store (JSON, money as strings).

    A shard gets its share of each budget: shards run in separate processes, each with its own
    spend guard, so N shards of a 10 USD run are 10/N USD each and never more than 10 together.
    """
    share = Decimal(shard.count) if shard else Decimal(1)
    run_budget = manifest.settings.budget_usd
    return {
        "budget_usd": None if run_budget is None else str(run_budget / share),
        "job_budgets": {
            job.name: str(job.budget_usd / share) for job in manifest.jobs if job.budget_usd is not None
        },
        "providers": {job.name: job.provider for job in manifest.jobs if job.provider},
        "concurrency": manifest.settings.concurrency,
        "uncertain_policy": manifest.settings.uncertain,
    }


@task(name="plan", persist_result=False, cache_policy=NO_CACHE, retries=0)
def plan_items(manifest_path: Path, paths: RunPaths, shard: Shard | None = None) -> int:
    """Validate the manifest and add its new items (this shard's only) to the store, streaming."""
    manifest = open_manifest(manifest_path)
    manifest.validate().raise_if_invalid()
    items = manifest.iter_items()
    if shard is not None:
        items = (item for item in items if shard.contains(item.key))
    store = CheckpointStore(paths.checkpoint)
    try:
        store.save_run(manifest.run_name, _run_settings(manifest, shard))
        return store.add_items(items)
    finally:
        store.close()


async def run_limiter(shared_limit: SharedLimit | None) -> tuple[Limiter, AdaptiveTokenBucket]:
    """The run's limiter, and the in-process bucket inside it (the engine fits polls to it).

    Without a shared limit the bucket learns the account's limit from the gateway's headers.
    """
    bucket = AdaptiveTokenBucket(shared_limit.rpm if shared_limit else None)
    if shared_limit is None:
        return bucket, bucket
    return await open_shared_limiter(shared_limit, local=bucket), bucket


def _engine_settings(saved: dict[str, Any], cancel_remote_on_stop: bool) -> EngineSettings:
    return EngineSettings(
        concurrency=int(saved.get("concurrency", EngineSettings.concurrency)),
        uncertain_policy=saved.get("uncertain_policy", "report"),
        cancel_remote_on_stop=cancel_remote_on_stop,
    )


def _budgets(saved: dict[str, Any]) -> Any:
    from relaybatch.costs import Budgets

    run_usd = saved.get("budget_usd")
    jobs = {job: Decimal(usd) for job, usd in (saved.get("job_budgets") or {}).items()}
    return Budgets(run_usd=None if run_usd is None else Decimal(run_usd), job_usd=jobs or None)


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
    from relaybatch.costs import spend_guard_for_run

    # The key is read here, inside the process that sends: it is never a parameter.
    settings = Settings(base_url=base_url) if base_url else Settings()
    limiter, bucket = await run_limiter(shared_limit)
    store = CheckpointStore(paths.checkpoint)
    saved = store.run_settings()
    stop = asyncio.Event()
    try:
        async with (
            open_client(settings, limiter) as client,
            spend_guard_for_run(
                store, client, budgets=_budgets(saved), providers=saved.get("providers")
            ) as guard,
        ):
            work = asyncio.ensure_future(
                execute(
                    store,
                    client,
                    settings=_engine_settings(saved, cancel_remote_on_stop),
                    limiter=bucket,
                    spend=guard,
                    stop=stop,
                    # A live table for a person at a terminal; workers and CI logs get none.
                    progress=RichProgress() if sys.stderr.isatty() else None,
                )
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
        return ExecuteResult(summary.counts, summary.stopped, summary.spent_usd)
    except UserError as error:
        # Something the user must fix before anything is sent (an ambiguous price, a missing key):
        # the run stops resumable with the message, instead of a task failure and its traceback.
        return ExecuteResult(store.count_by_state(), str(error), None)
    finally:
        store.close()


@task(name="export", persist_result=False, cache_policy=NO_CACHE, retries=0)
def export_outputs(paths: RunPaths) -> list[Path]:
    """Rebuild the results Parquet files from the checkpoint store."""
    store = CheckpointStore(paths.checkpoint)
    try:
        return export_results(store, paths.results)
    finally:
        store.close()


@task(name="merge-shards", persist_result=False, cache_policy=NO_CACHE, retries=0)
def merge_shards(run: RunPaths, shard_count: int) -> list[Path]:
    """One result set from every shard's results."""
    return merge_shard_results(run, shard_count)
