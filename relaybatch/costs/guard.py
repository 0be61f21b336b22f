"""The run's spend guard: the engine's spend seam (docs/engine.md) backed by budget and ledger.

``reserve`` prices the call's worst case and asks the budget; ``settle`` prices the real usage,
queues the ledger row and turns the reservation into spend; ``commit`` makes the queued rows
durable in one transaction (the engine calls it just before each checkpoint commit, so a row is
never durable later than the item state it explains, and a busy run pays one ledger commit per
group instead of one per call); ``release`` gives a reservation back. ``open_spend_guard``
fetches every price the run needs before anything is sent, so an ambiguous price (409) stops the
run before it spends a cent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from relaybatch.costs.budget import Budget
from relaybatch.costs.calls import ROUTE_PRICED_KINDS, call_model, prices_for, usage_for_call
from relaybatch.costs.ledger import CostStore, LedgerRow, build_row, write_ledger
from relaybatch.costs.price import CallCost, price_call
from relaybatch.costs.pricing import PriceBook, PricingClient, fetch_pricing, parse_pricing
from relaybatch.costs.report import COST_STORE_NAME, LEDGER_NAME
from relaybatch.costs.usage import UsageCounts, UsageError
from relaybatch.costs.worst_case import worst_case_usd
from relaybatch.engine.spend import SpendFigures


class Call(Protocol):
    """The engine's BilledCall, as far as costs are concerned (read-only, as its frozen dataclass)."""

    @property
    def key(self) -> str: ...
    @property
    def item_id(self) -> str: ...
    @property
    def job(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def request(self) -> dict[str, Any]: ...
    @property
    def attempt(self) -> int: ...


@dataclass(frozen=True)
class Budgets:
    run_usd: Decimal | None = None
    job_usd: Mapping[str, Decimal] | None = None


class RunSpendGuard:
    """Implements the engine's SpendGuard protocol for one run."""

    def __init__(
        self,
        run: str,
        store: CostStore,
        prices: PriceBook,
        budget: Budget,
        providers: Mapping[str, str] | None = None,
    ) -> None:
        self.run = run
        self.store = store
        self.prices = prices
        self.budget = budget
        self.providers = dict(providers or {})
        self._started: dict[str, tuple[float, Decimal | None]] = {}
        self._queued: list[LedgerRow] = []
        self._lock = threading.Lock()
        self._stop: str | None = None
        self._unknown = Decimal(0)  # outcome unknown this execution, counted at the worst case

    # -- the engine's seam ------------------------------------------------------------------

    def reserve(self, call: Call) -> bool:
        worst = worst_case_usd(call.kind, call.request, self._prices(call))
        refusal = self.budget.reserve(call.key, call.job, worst)
        if refusal is not None:
            with self._lock:
                self._stop = self._stop or refusal.message(f"{call.job}/{call.item_id}")
            return False
        with self._lock:
            self._started[call.key] = (time.monotonic(), worst)
        return True

    def settle(self, call: Call, result: dict[str, Any] | None) -> Decimal | None:
        """Record the charge; None when the cost is not known (outcome unknown, or a price missing)."""
        with self._lock:
            started, worst = self._started.pop(call.key, (None, None))
        latency = None if started is None else time.monotonic() - started
        prices = self._prices(call)
        usage, cost = self._cost(call, result, prices)
        row = build_row(
            run=self.run,
            job=call.job,
            item_id=call.item_id,
            item_key=call.key,
            kind=call.kind,
            model=call_model(call.kind, call.request),
            provider=(prices.provider if prices else None) or self.providers.get(call.job),
            usage=usage,
            cost=cost,
            remote_id=_remote_id(result),
            latency_seconds=latency,
            reserved_usd=worst,
            outcome="charged" if result is not None else "unknown",
            # Each billed attempt is its own row: a resent call may have been charged twice.
            call=f"attempt-{call.attempt}",
        )
        with self._lock:
            self._queued.append(row)
        # What the budget counts: the charge, or when it is not known the worst case held for it.
        counted = cost.usd if cost.usd is not None else max(cost.known_usd, worst or Decimal(0))
        self.budget.settle(call.key, call.job, counted)
        if result is None:
            with self._lock:
                self._unknown += counted
        return cost.usd

    def figures(self) -> SpendFigures:
        """Where the run stands against its budget; the progress display shows it."""
        with self._lock:
            unknown = self._unknown
        budget = self.budget
        return SpendFigures(budget.spent - unknown, unknown, budget.in_flight, budget.run_limit)

    def commit(self) -> None:
        """Make every charge settled so far durable (one transaction)."""
        with self._lock:
            rows, self._queued = self._queued, []
        try:
            self.store.record_many(rows)
        except BaseException:
            with self._lock:
                self._queued[:0] = rows  # not stored: keep them for the next commit
            raise

    def release(self, call: Call) -> None:
        with self._lock:
            self._started.pop(call.key, None)
        self.budget.release(call.key)

    def stop_message(self) -> str:
        with self._lock:
            return self._stop or "budget reached"

    # -- helpers ----------------------------------------------------------------------------

    def _prices(self, call: Call) -> Any:
        return prices_for(call.kind, call.request, self.prices, self.providers.get(call.job))

    def _cost(self, call: Call, result: dict[str, Any] | None, prices: Any) -> tuple[UsageCounts, CallCost]:
        if result is None:
            # Charged or not, nobody knows what: nothing to price. The row says so.
            return UsageCounts(), CallCost((), "base", ("outcome unknown",))
        try:
            usage = usage_for_call(call.kind, call.request, result)
        except UsageError as error:
            return UsageCounts(), CallCost((), "base", (f"usage unreadable: {error}",))
        return usage, price_call(prices, usage)

    def write_ledger(self) -> Path:
        self.commit()
        return write_ledger(self.store, self.store.path.parent / LEDGER_NAME)

    def close(self) -> None:
        """Commit what is queued, export the ledger Parquet and close the cost store."""
        try:
            self.write_ledger()
        finally:
            self.store.close()


def _remote_id(result: Mapping[str, Any] | None) -> str | None:
    remote = result.get("remote") if result else None
    if isinstance(remote, Mapping):
        value = remote.get("id") or remote.get("task_id")
        return str(value) if value else None
    return None


async def open_spend_guard(
    run_dir: Path,
    client: PricingClient,
    calls: Iterable[tuple[str, str, str]],
    *,
    budgets: Budgets | None = None,
    providers: Mapping[str, str] | None = None,
    run_name: str | None = None,
) -> RunSpendGuard:
    """A guard for one run: prices for every (job, kind, model) fetched (or reloaded) first.

    Prices already stored with the run are reused, so a resumed run prices the same way;
    spend already in the ledger counts against the budget.
    """
    store = CostStore(run_dir / COST_STORE_NAME)
    try:
        book = PriceBook(lambda model, provider: fetch_pricing(client, model, provider))
        for model, provider, pricing in store.saved_prices():
            book.put(parse_pricing(pricing, model=model), provider)
        for job, kind, model in sorted(set(calls)):
            if kind not in ROUTE_PRICED_KINDS or not model:
                continue
            provider = (providers or {}).get(job)
            known = book.get(model, provider) is not None
            prices = await book.load(model, provider, job=job)
            if prices is not None and not known:
                store.save_prices(prices, provider)
        spent, spent_by_job = store.spent()
        budgets = budgets or Budgets()
        budget = Budget(budgets.run_usd, budgets.job_usd, spent=spent, spent_by_job=spent_by_job)
    except BaseException:
        store.close()
        raise
    return RunSpendGuard(run_name or run_dir.name, store, book, budget, providers)


async def _fetch(client: PricingClient, model: str, provider: str | None) -> Mapping[str, Any]:
    answer = await client.get_pricing(model, provider)
    if hasattr(answer, "model_dump"):
        dumped: Mapping[str, Any] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return dict(answer)
