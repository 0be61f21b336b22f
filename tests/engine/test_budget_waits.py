"""A budget refusal caused only by calls in flight waits for them to settle; a spent budget stops.

Each call reserves its worst case (here a 4,000-token output cap) and settles at what the emulator
billed (a few tokens), so the worst cases of a few calls in flight block the next one while their
real costs leave room for every item. The run (or job) must wait for settlements, never spin, never
hold more than its budget, and still stop at once when what is spent leaves no room.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from decimal import Decimal
from typing import Any

from engine_fakes import FAST, ClientFactory
from engine_items import item
from starlette.applications import Starlette

from relaybatch.cost_model import Budgets
from relaybatch.costs import RunSpendGuard, spend_guard_for_run
from relaybatch.engine import BilledCall, CheckpointStore, RunSummary, execute
from relaybatch.engine.spend import Refused
from relaybatch.manifests import Item

CAP = 4000
ITEMS = 30
SETTINGS = replace(FAST, concurrency=8)


def capped_chat(n: int, job: str = "job") -> Item:
    request = {"model": "relay-chat-small", "messages": [{"role": "user", "content": f"q{n:03}"}]}
    return item("chat", {**request, "max_tokens": CAP}, f"chat-{n:03}", job)


class Watched:
    """The real guard, checked at every reservation: what is spent plus every worst case held never
    passes the budget; counts reservations asked and refusals that waited."""

    def __init__(self, guard: RunSpendGuard, scope: str | None = None) -> None:
        self.guard = guard
        self.scope = scope  # None: the run's budget is watched, else that job's
        self.asked = 0
        self.waits = 0
        self.peak_in_flight = Decimal(0)  # the most held for calls in flight at once

    def reserve(self, call: BilledCall) -> bool:
        self.asked += 1
        admitted = self.guard.reserve(call)
        budget = self.guard.budget
        in_flight = budget.in_flight_for(self.scope)
        if self.scope is None:
            spent, limit = budget.spent, budget.run_limit
        else:
            spent, limit = budget.spent_by_job().get(self.scope, Decimal(0)), budget.job_limits[self.scope]
        held = spent + in_flight
        assert limit is None or held <= limit
        self.peak_in_flight = max(self.peak_in_flight, in_flight)
        return admitted

    def refusal(self, call: BilledCall) -> Refused:
        refused = self.guard.refusal(call)
        self.waits += refused.may_fit_later
        return refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self.guard, name)


async def worst_case_of_one(store: CheckpointStore, make_client: ClientFactory, sample: Item) -> Decimal:
    """What the guard reserves for one capped chat (asked of the guard itself, then given back)."""
    async with spend_guard_for_run(store, make_client()) as probe:
        call = BilledCall(sample.key, sample.item_id, sample.job, sample.kind, sample.request, 1)
        assert probe.reserve(call)
        worst = probe.reserved_for(call.key)
        probe.release(call)
    assert worst is not None and worst > 0
    return worst


def billed(app: Starlette) -> Decimal:
    return sum((charge.usd for charge in app.state.emulator.ledger), Decimal(0))


async def run_with(
    store: CheckpointStore, make_client: ClientFactory, budgets: Budgets, scope: str | None = None
) -> tuple[RunSummary, Watched]:
    async with spend_guard_for_run(store, make_client(), budgets=budgets) as guard:
        watched = Watched(guard, scope)
        async with asyncio.timeout(60):  # a deadlock fails the test instead of hanging it
            summary = await execute(store, make_client(), settings=SETTINGS, spend=watched)  # type: ignore[arg-type]
    return summary, watched


async def test_a_run_budget_blocked_only_by_calls_in_flight_waits_and_finishes_every_item(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    items = [capped_chat(n) for n in range(ITEMS)]
    store.add_items(items)
    worst = await worst_case_of_one(store, make_client, items[0])
    budget = worst * Decimal("3.5")  # three worst cases in flight at most, eight workers

    summary, watched = await run_with(store, make_client, Budgets(run_usd=budget))

    assert summary.stopped is None, summary.stopped
    assert summary.counts == {"done": ITEMS}
    assert watched.waits > 0  # the worst cases in flight did block calls: they waited
    assert watched.peak_in_flight <= 3 * worst
    # Woken by settlements, never spinning: at most one ask per item plus one per waiting worker
    # for each settlement.
    assert watched.asked <= ITEMS * (SETTINGS.concurrency + 1)
    assert billed(fast_app) == summary.spent_usd <= budget


async def test_a_run_budget_spent_by_settled_calls_stops_at_once(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    items = [capped_chat(n) for n in range(ITEMS)]
    store.add_items(items[:1])
    worst = await worst_case_of_one(store, make_client, items[0])
    await run_with(store, make_client, Budgets())  # one call, to learn about what each costs
    charge = billed(fast_app)
    assert 0 < charge * 20 < worst  # the worst case is far above the real cost
    store.add_items(items[1:])
    # Room for the worst case of one call after about a dozen real charges.
    budget = charge * 12 + worst

    summary, _ = await run_with(store, make_client, Budgets(run_usd=budget))

    assert summary.stopped is not None and "run budget of" in summary.stopped
    assert "reached" in summary.stopped and "held for calls in flight" not in summary.stopped
    done = summary.counts["done"]
    assert 3 < done < ITEMS - 10 and summary.counts == {"done": done, "pending": ITEMS - done}
    spent = billed(fast_app)
    assert spent == summary.spent_usd + charge <= budget
    assert budget - spent < worst  # it stopped only when the next worst case could not fit at all


async def test_a_job_budget_blocked_only_by_its_calls_in_flight_waits_and_the_other_job_goes_on(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    capped = [capped_chat(n, job="capped") for n in range(ITEMS)]
    store.add_items([*capped, *(capped_chat(n, job="free") for n in range(100, 110))])
    worst = await worst_case_of_one(store, make_client, capped[0])
    job_budget = worst * Decimal("2.5")

    summary, watched = await run_with(store, make_client, Budgets(job_usd={"capped": job_budget}), "capped")

    assert summary.stopped is None, summary.stopped
    assert summary.counts == {"done": ITEMS + 10}
    assert watched.waits > 0
    assert watched.guard.budget.spent_by_job()["capped"] <= job_budget
