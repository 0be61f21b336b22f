"""Assembling a run: plan a manifest into its store, then build what an execution needs.

``plan_run`` opens the manifest once, validates it in one streaming pass and adds its items
(a shard's share only) to the run's checkpoint store in another: no list of items is ever built.
``open_run`` gives an execution its resources (settings, gateway client, limiter, spend guard,
store) and closes them afterwards; a caller may hand in its own client (benchmarks, tests). The
CLI, the Prefect tasks and the benchmarks all go through here; nothing in this module knows
about Prefect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    EngineSettings,
    ProgressReporter,
    RunSummary,
    execute,
)
from relaybatch.errors import UserError
from relaybatch.limiting import Limiter
from relaybatch.manifests import Manifest, Validation, open_manifest
from relaybatch.run.paths import RunPaths, run_paths
from relaybatch.run.sharding import Shard

if TYPE_CHECKING:
    from relaybatch.costs import Budgets
    from relaybatch.gateway import GatewayClient
    from relaybatch.shared_limit import SharedLimit


@dataclass(frozen=True)
class PlannedRun:
    """A manifest planned into its run's store: where the run lives and how many items were new."""

    paths: RunPaths
    label: str
    added: int


@dataclass(frozen=True)
class ExecuteResult:
    counts: dict[str, int]
    stopped: str | None
    spent_usd: Decimal | None
    sent: int = 0
    # The signal (SIGINT, SIGTERM) that stopped the execution; None when none did.
    interrupted: str | None = None


def stored_settings(manifest: Manifest, shard: Shard | None) -> dict[str, Any]:
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


def plan_run(
    manifest_path: Path,
    runs_dir: Path | None = None,
    shard: Shard | None = None,
    check: Callable[[Validation], None] | None = None,
) -> PlannedRun:
    """Validate the manifest and add its new items (this shard's only) to the run's store.

    ``check`` adds problems only a gateway can show (model families, from its catalog) to the pass.
    Raises ManifestInvalid (every problem, with file, line and field) before anything is written.
    """
    manifest = open_manifest(manifest_path)
    validation = manifest.validate()
    if check is not None:
        check(validation)
    validation.raise_if_invalid()
    paths = run_paths(runs_dir, manifest.run_name)
    if shard is not None:
        paths = shard.paths(paths)
    items = manifest.iter_items()
    if shard is not None:
        items = (item for item in items if shard.contains(item.key))
    with CheckpointStore(paths.checkpoint) as store:
        store.save_run(manifest.run_name, stored_settings(manifest, shard))
        added = store.add_items(items)
    label = f"{manifest.run_name} shard {shard}" if shard else manifest.run_name
    return PlannedRun(paths, label, added)


async def run_limiter(shared_limit: SharedLimit | None) -> tuple[Limiter, AdaptiveTokenBucket]:
    """The run's limiter, and the in-process bucket inside it (the engine fits polls to it).

    Without a shared limit the bucket learns the account's limit from the gateway's headers.
    """
    from relaybatch.shared_limit import open_shared_limiter

    bucket = AdaptiveTokenBucket(shared_limit.rpm if shared_limit else None)
    if shared_limit is None:
        return bucket, bucket
    return await open_shared_limiter(shared_limit, local=bucket), bucket


def engine_settings(saved: dict[str, Any], cancel_remote_on_stop: bool = False) -> EngineSettings:
    return EngineSettings(
        concurrency=int(saved.get("concurrency", EngineSettings.concurrency)),
        uncertain_policy=saved.get("uncertain_policy", "report"),
        cancel_remote_on_stop=cancel_remote_on_stop,
    )


def budgets(saved: dict[str, Any]) -> Budgets:
    from relaybatch.costs import Budgets

    run_usd = saved.get("budget_usd")
    jobs = {job: Decimal(usd) for job, usd in (saved.get("job_budgets") or {}).items()}
    return Budgets(run_usd=None if run_usd is None else Decimal(run_usd), job_usd=jobs or None)


@dataclass
class OpenRun:
    """Everything one execution of a run uses; ``execute`` drives it."""

    store: CheckpointStore
    client: GatewayClient
    settings: EngineSettings
    bucket: AdaptiveTokenBucket
    guard: Any

    async def execute(
        self, stop: asyncio.Event | None = None, progress: ProgressReporter | None = None
    ) -> RunSummary:
        return await execute(
            self.store,
            self.client,
            settings=self.settings,
            limiter=self.bucket,
            spend=self.guard,
            stop=stop,
            progress=progress,
        )


@contextlib.asynccontextmanager
async def open_run(
    paths: RunPaths,
    *,
    base_url: str | None = None,
    shared_limit: SharedLimit | None = None,
    cancel_remote_on_stop: bool = False,
    client: GatewayClient | None = None,
) -> AsyncIterator[OpenRun]:
    """Store, limiter, client and spend guard for an execution of the run at ``paths``.

    The API key is read here, inside the process that sends: it is never a parameter. With
    ``client`` given, that client is used (and not closed) instead of one built from settings.
    """
    from relaybatch.connect import open_client
    from relaybatch.costs import spend_guard_for_run
    from relaybatch.settings import Settings

    limiter, bucket = await run_limiter(shared_limit)
    with CheckpointStore(paths.checkpoint) as store:
        saved = store.run_settings()
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                settings = Settings(base_url=base_url) if base_url else Settings()
                client = await stack.enter_async_context(open_client(settings, limiter))
            guard = await stack.enter_async_context(
                spend_guard_for_run(store, client, budgets=budgets(saved), providers=saved.get("providers"))
            )
            yield OpenRun(store, client, engine_settings(saved, cancel_remote_on_stop), bucket, guard)


def refused_before_sending(paths: RunPaths, error: UserError) -> ExecuteResult:
    """Something the user must fix before anything is sent (an ambiguous price, a missing key):
    the run stops resumable with the message, instead of a failure and its traceback."""
    with CheckpointStore(paths.checkpoint) as store:
        return ExecuteResult(store.count_by_state(), str(error), None)


def result_of(summary: RunSummary) -> ExecuteResult:
    return ExecuteResult(summary.counts, summary.stopped, summary.spent_usd, summary.sent)
