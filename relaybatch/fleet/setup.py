"""An execution's share of what the Prefect server holds: which budgets and caps, opened before the
first send and closed after the last (docs/prefect.md, "Budget and render cap on the server")."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.costs.guard import RunSpendGuard
from relaybatch.engine.poll_plan import RenderSettings
from relaybatch.fleet.budget import ServerBudget, ServerBudgetGuard, budget_specs, fleet_settings
from relaybatch.fleet.renders import ServerRenderSlots
from relaybatch.run_folder import RunPaths
from relaybatch.server_limits import server_limits

# The stored settings' key of a store whose run budget and render caps the server holds: a
# partition planned with a Prefect server configured. Every execution of it then needs the server.
HELD_BY_SERVER = "held_by_server"


@dataclass
class Held:
    """What the engine uses instead of the run's own guard and slots (None: the local ones)."""

    guard: Any
    slots: ServerRenderSlots | None = None
    budget: ServerBudgetGuard | None = None


def holder_of(paths: RunPaths, run_name: str) -> str:
    """The store's name in the holder limits: the run's, and its partition's or shard's folder."""
    return run_name if paths.root.name == run_name else f"{run_name}:{paths.root.name}"


def whole_run_budget(saved: dict[str, Any]) -> Decimal | None:
    from relaybatch.costs.run_budgets import RUN_BUDGETS

    whole = (saved.get(RUN_BUDGETS) or {}).get("budget_usd", saved.get("budget_usd"))
    return None if whole is None else Decimal(whole)


def whole_job_budgets(saved: dict[str, Any]) -> dict[str, Decimal]:
    """Each job's whole budget, for a store that enforces none of them itself (a partition planned
    with a server: the server holds them); empty for a store that enforces its own share."""
    from relaybatch.costs.run_budgets import RUN_BUDGETS

    if saved.get("job_budgets"):
        return {}  # planned before the server held job budgets: the store keeps its share
    whole = (saved.get(RUN_BUDGETS) or {}).get("job_budgets") or {}
    return {job: Decimal(usd) for job, usd in whole.items()}


def other_stores(paths: RunPaths, run_name: str) -> dict[str, Callable[[str | None], Decimal | None]]:
    """The run's other stores (with a cost store), each by its holder's name, with how to read
    what its cost ledger counts (for one job, or all): from its ledger Parquet file, never another
    host's SQLite (None when it has none yet). Read only for a store no process has counted on the
    server yet."""
    return {
        holder_of(folder, run_name): functools.partial(ledger_counted, folder.ledger)
        for folder in RunPaths(RunPaths(paths.root).run_root).store_folders()
        if folder.root != paths.root and folder.cost_store.exists()
    }


def ledger_counted(ledger: Path, job: str | None = None) -> Decimal | None:
    """What a ledger Parquet file counts against a budget (charges; unknown outcomes and open
    reservations at their worst case), of one job's calls or all; None when there is no such file."""
    from relaybatch.costs.run_budgets import ledger_spent

    if not ledger.exists():
        return None
    total, by_job = ledger_spent(ledger)
    return total if job is None else by_job.get(job, Decimal(0))


@contextlib.asynccontextmanager
async def held_by_server(
    paths: RunPaths, run_name: str, saved: dict[str, Any], guard: RunSpendGuard, renders: RenderSettings
) -> AsyncIterator[Held]:
    settings = fleet_settings()
    holds_run = bool(saved.get(HELD_BY_SERVER)) or settings.holds_run
    holder = holder_of(paths, run_name)
    whole = (whole_run_budget(saved), whole_job_budgets(saved)) if holds_run else (None, {})
    specs = budget_specs(run_name, holder, whole[0], settings, whole[1])
    caps = dict(renders.max_in_flight_per_model) if holds_run else {}
    if not specs and not caps:
        yield Held(guard)
        return
    what = "the run's budget and caps" if holds_run else "the account's budget"
    limits = server_limits(what)
    limits.waiting_for = lambda: "polls of renders already paid go on"
    budget: ServerBudgetGuard | None = None
    slots: ServerRenderSlots | None = None
    try:
        limits.start_watch()
        if specs:
            budget = ServerBudgetGuard(
                guard, [ServerBudget(limits, spec) for spec in specs], limits, settings
            )
            await budget.open(other_stores(paths, run_name) if holds_run else None)
        if caps:
            per_job = {job: own.max_in_flight for job, own in renders.jobs.items() if own.max_in_flight}
            slots = ServerRenderSlots(limits, holder, caps, per_job, renders.max_in_flight_per_model)
            await slots.open()
        yield Held(budget or guard, slots, budget)
    finally:
        try:
            if slots is not None:
                await slots.close()
            if budget is not None:
                await budget.close()
        finally:
            await limits.aclose()


def server_budget_lines(run_name: str, jobs: list[str] | None = None) -> list[str]:
    """For `relaybatch status`: the run's budget, each of ``jobs``' and the account's as the
    Prefect server counts them (every process's charges, unknown outcomes and calls in flight at
    their worst case, and room taken), when a server is configured and holds them. One short read
    each."""
    import httpx

    from relaybatch.fleet.budget import PREFIX, UNIT_USD
    from relaybatch.prefect_server import configured_api_url
    from relaybatch.server_limits import api_headers

    url = configured_api_url()
    if url is None:
        return []
    names = {f"{PREFIX}:run:{run_name}": "run"}
    names.update({f"{PREFIX}:job:{run_name}:{job}": f"job {job}'s" for job in jobs or []})
    settings = fleet_settings()
    if settings.account_budget_usd is not None:
        names[f"{PREFIX}:account:{settings.account_name}"] = "account"
    lines = []
    try:
        with httpx.Client(base_url=url.rstrip("/"), headers=api_headers(), timeout=5.0) as client:
            for name, whose in names.items():
                answer = client.get(f"/v2/concurrency_limits/{name}")
                if answer.status_code != 200:
                    continue
                body = answer.json()
                counted, budget = body["active_slots"] * UNIT_USD, body["limit"] * UNIT_USD
                lines.append(
                    f"{whose} budget held by the Prefect server ({name}): {counted} of {budget} USD counted "
                    f"there by every process, {budget - counted} left"
                )
    except httpx.HTTPError as error:
        lines.append(f"budget on the Prefect server at {url}: cannot be read ({type(error).__name__})")
    return lines
