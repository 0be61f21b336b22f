"""Wiring for a run: the budgets a manifest sets, and a spend guard that lives as long as the run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from relaybatch.cost_model import PricingClient
from relaybatch.costs.guard import (
    Budgets,
    RunSpendGuard,
    open_spend_guard,
)
from relaybatch.engine.states import ALL_STATES, CANCELLED, DONE, SUPERSEDED

# Items whose calls may still be billed (sent, resent, polled): only their models need prices now.
# Done items were priced when they were (a resumed million-item run does not read them all).
BILLABLE_STATES = tuple(state for state in ALL_STATES if state not in (DONE, CANCELLED, SUPERSEDED))


def budgets_from_manifest(manifest: Any) -> Budgets:
    """`run.budget_usd` and each job's `budget_usd` from an opened manifest (relaybatch.manifests)."""
    from relaybatch.cost_model.periods import PeriodBudgets

    jobs = {job.name: job.budget_usd for job in manifest.jobs if job.budget_usd is not None}
    periods = manifest.settings.period_budgets()
    timezone = manifest.settings.budget_timezone
    return Budgets(
        run_usd=manifest.settings.budget_usd,
        job_usd=jobs,
        periods=PeriodBudgets(periods, timezone) if periods else None,
    )


@asynccontextmanager
async def spend_guard_for_run(
    store: CheckpointStore,
    client: PricingClient,
    *,
    budgets: Budgets | None = None,
    providers: Mapping[str, str] | None = None,
) -> AsyncIterator[RunSpendGuard]:
    """A guard for the run whose checkpoint store is ``store``; on exit the ledger Parquet is written.

    Use it around ``relaybatch.engine.execute(store, client, spend=guard)``.
    """
    guard = await open_spend_guard(
        store.path.parent,
        client,
        store.calls(BILLABLE_STATES),
        budgets=budgets,
        providers=providers,
        run_name=store.run_name(),
    )
    try:
        yield guard
    finally:
        guard.close()


if TYPE_CHECKING:
    from relaybatch.engine.spend import SpendGuard
    from relaybatch.engine.store import CheckpointStore

    def _fits_the_engine_seam(guard: RunSpendGuard) -> SpendGuard:
        """mypy proves here that the guard is the engine's SpendGuard as it is (no cast needed)."""
        return guard
