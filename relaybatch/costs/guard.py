"""The run's spend guard: the engine's spend seam (docs/engine.md) backed by budget and ledger.

``reserve`` prices the call's worst case and asks the budget, and holds its reservation row until
``sending`` (the limiter's token taken, the item about to be marked ``sending``) queues it, so a
call that waits at the limit and never leaves is never in the ledger, even when the process dies
there; ``settle`` prices the real usage, queues the ledger row and turns the reservation into
spend; ``commit`` makes the queued rows durable in one transaction (the engine calls it just
before each checkpoint commit, so a row is never durable later than the item state it explains,
and a busy run pays one ledger commit per group instead of one per call); ``release`` gives a
reservation back. ``open_spend_guard`` fetches every price the run needs before anything is
sent, so an ambiguous price (409) stops the run before it spends a cent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from relaybatch.cost_model import (
    ROUTE_PRICED_KINDS,
    Budget,
    Budgets,
    CallCost,
    PriceBook,
    PricingClient,
    Refusal,
    UsageCounts,
    UsageError,
    call_model,
    fetch_pricing,
    parse_pricing,
    price_call,
    prices_for,
    usage_for_call,
    worst_case_usd,
)
from relaybatch.cost_model.periods import period_caps
from relaybatch.costs.ledger import (
    CHARGED,
    OUTCOME_UNKNOWN,
    RESERVED,
    UNKNOWN,
    CostStore,
    LedgerRow,
    build_row,
    write_ledger,
)
from relaybatch.costs.run_budgets import shard_split, spent_beside
from relaybatch.engine.spend import Refused, SpendFigures
from relaybatch.run_folder import COST_STORE_NAME, LEDGER_NAME

IN_FLIGHT = "in flight"


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


class RunSpendGuard:
    """Implements the engine's SpendGuard protocol for one run."""

    def __init__(
        self,
        run: str,
        store: CostStore,
        prices: PriceBook,
        budget: Budget,
        providers: Mapping[str, str] | None = None,
        *,
        unknown: Decimal = Decimal(0),
        elsewhere: Decimal = Decimal(0),
        elsewhere_by_job: Mapping[str, Decimal] | None = None,
    ) -> None:
        """``unknown``: what earlier executions' unknown outcomes count (at their worst case);
        ``elsewhere``: what the run's other stores spent, counted in the budget here (of it, per
        job: ``elsewhere_by_job``)."""
        self.run = run
        self.store = store
        self.prices = prices
        self.budget = budget
        self.providers = dict(providers or {})
        self._started: dict[str, tuple[float, Decimal | None]] = {}
        self._queued: list[LedgerRow] = []
        # Reservation rows of calls admitted and not yet leaving (waiting at the limit), by call key.
        self._held: dict[str, LedgerRow] = {}
        self._released: list[str] = []  # ids of reservation rows already stored, to drop
        self._lock = threading.Lock()
        self._refusals: dict[str, Refusal] = {}  # by call key, until the engine asks why
        self._unknown = unknown  # outcomes unknown, counted at the worst case
        self._elsewhere = elsewhere
        self._elsewhere_by_job = dict(elsewhere_by_job or {})
        self.execution: int | None = None  # the execution's id in the checkpoint store, on every row

    # -- the engine's seam ------------------------------------------------------------------

    def worst_case(self, call: Call) -> Decimal | None:
        """What ``reserve`` holds for the call: the most it can cost (None: unbounded, not known)."""
        return worst_case_usd(call.kind, call.request, self._prices(call))

    def reserve(self, call: Call) -> bool:
        """Admit the call under the budget and hold its reservation row for ``sending``."""
        worst = self.worst_case(call)
        refusal = self.budget.reserve(call.key, call.job, worst)
        if refusal is not None:
            with self._lock:
                self._refusals[call.key] = refusal  # the engine asks `refusal` right after
            return False
        reservation = self._row(call, None, UsageCounts(), CallCost((), "base", (IN_FLIGHT,)), worst)
        with self._lock:
            self._started[call.key] = (time.monotonic(), worst)
            self._held[call.key] = replace(reservation, outcome=RESERVED)
        return True

    def sending(self, call: Call) -> None:
        """The call is about to leave: its reservation row is queued, durable with the next commit
        (the one that marks its item sending, or an earlier one), so before the send."""
        with self._lock:
            held = self._held.pop(call.key, None)
            if held is not None:
                self._queued.append(held)

    def refusal(self, call: Call) -> Refused:
        """Why ``reserve`` refused the call: the budget's scope, its message, and whether only
        reservations of calls in flight stood in the way (the engine then waits for one to settle)."""
        with self._lock:
            refusal = self._refusals.pop(call.key, None)
        if refusal is None:
            raise LookupError(f"no refusal recorded for call {call.key}: ask right after reserve")
        message = refusal.message(f"{call.job}/{call.item_id}")
        job = None if refusal.whole_run else call.job
        return Refused(message, job, may_fit_later=refusal.only_in_flight)

    def settle(self, call: Call, result: dict[str, Any] | None) -> Decimal | None:
        """Record the charge; None when the cost is not known (outcome unknown, or a price missing)."""
        return self.settle_counting(call, result)[0]

    def settle_counting(self, call: Call, result: dict[str, Any] | None) -> tuple[Decimal | None, Decimal]:
        """``settle``, and what the budget now counts for the call (its cost, or its worst case)."""
        with self._lock:
            started, worst = self._started.pop(call.key, (None, None))
            self._held.pop(call.key, None)  # a charge row takes its place either way
        latency = None if started is None else time.monotonic() - started
        answered_in = getattr(call, "latency_ms", None)  # BilledCall has it once the answer came
        if answered_in is not None:
            latency = answered_in / 1000.0  # the engine's send-to-answer: the results' figure
        usage, cost = self._cost(call, result, self._prices(call))
        row = self._row(call, result, usage, cost, worst, latency)
        with self._lock:
            self._queued.append(row)
        # What the budget counts: the charge, or when it is not known the worst case held for it
        # (the ledger's budget_amount of this row); the part beyond what is known is "unknown",
        # as the report splits it (unknown_amount).
        counted = cost.usd if cost.usd is not None else max(cost.known_usd, worst or Decimal(0))
        self.budget.settle(call.key, call.job, counted)
        if cost.usd is None:
            with self._lock:
                self._unknown += counted - cost.known_usd
        return cost.usd, counted

    def figures(self) -> SpendFigures:
        """Where the run stands against its budget; the progress display shows it. Unknown is the
        report's figure (the ledger's unknown_amount): the worst case held beyond the known part
        for every call of unknown outcome or price, this execution's and earlier ones'."""
        with self._lock:
            unknown = self._unknown
        budget = self.budget
        shards = shard_split(self.store.path.parent)
        periods = tuple((cap.name, cap.limit, used) for cap, used in budget.period_use())
        return SpendFigures(
            budget.spent - unknown,
            unknown,
            budget.in_flight,
            budget.run_limit,
            shards,
            periods,
            elsewhere_usd=self._elsewhere,
            job_ceilings=tuple(
                (job, limit - self._elsewhere_by_job.get(job, Decimal(0)))
                for job, limit in sorted(budget.job_limits.items())
            ),
        )

    def reserved_for(self, key: str) -> Decimal | None:
        """The worst case held for a call in flight (telemetry puts it on the request's span)."""
        with self._lock:
            return self._started.get(key, (None, None))[1]

    def commit(self) -> None:
        """Make every reservation, charge and release so far durable (one transaction)."""
        with self._lock:
            rows, self._queued = self._queued, []
            released, self._released = self._released, []
        try:
            self.store.record_many(rows, released)
        except BaseException:
            with self._lock:
                self._queued[:0] = rows  # not stored: keep them for the next commit
                self._released[:0] = released
            raise

    def release(self, call: Call) -> None:
        """The call was not charged (or never sent): its reservation row, if queued, goes with the
        next commit (a row still held was never queued: nothing to drop)."""
        row_id = f"{call.key}:{_call_label(call)}"
        with self._lock:
            self._started.pop(call.key, None)
            if self._held.pop(call.key, None) is None:
                queued = [row for row in self._queued if row.outcome == RESERVED and row.item_key == call.key]
                for row in queued:
                    self._queued.remove(row)
                if not queued:
                    self._released.append(row_id)
        self.budget.release(call.key)

    # -- helpers ----------------------------------------------------------------------------

    def _row(
        self,
        call: Call,
        result: dict[str, Any] | None,
        usage: UsageCounts,
        cost: CallCost,
        worst: Decimal | None,
        latency: float | None = None,
    ) -> LedgerRow:
        prices = self._prices(call)
        return build_row(
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
            outcome=CHARGED if result is not None else UNKNOWN,
            call=_call_label(call),
            wasted=bool(getattr(call, "wasted", False)),  # the engine's BilledCall says so
            execution=self.execution,
        )

    def _prices(self, call: Call) -> Any:
        return prices_for(call.kind, call.request, self.prices, self.providers.get(call.job))

    def _cost(self, call: Call, result: dict[str, Any] | None, prices: Any) -> tuple[UsageCounts, CallCost]:
        if result is None:
            # Charged or not, nobody knows what: nothing to price. The row says so.
            return UsageCounts(), CallCost((), "base", (OUTCOME_UNKNOWN,))
        try:
            usage = usage_for_call(call.kind, call.request, result)
        except UsageError as error:
            return UsageCounts(), CallCost((), "base", (f"usage unreadable: {error}",))
        return usage, price_call(prices, usage)

    def write_ledger(self) -> Path:
        self.commit()
        return write_ledger(self.store, self.store.path.parent / LEDGER_NAME)

    def close(self) -> None:
        """Commit what is queued, export the ledger Parquet and close the cost store.

        A reservation still open now belongs to a call whose answer never came (the execution was
        cancelled with it in flight): it becomes an unknown outcome at its worst case.
        """
        try:
            self.commit()
            self.store.reservations_to_unknown()
            self.write_ledger()
            self.store.spent()  # its sums, kept: the next execution reads them back at once
        finally:
            self.store.close()


def _call_label(call: Call) -> str:
    """Each billed attempt is its own row: a resent call may have been charged twice."""
    return f"attempt-{call.attempt}"


def _remote_id(result: Mapping[str, Any] | None) -> str | None:
    remote = result.get("remote") if result else None
    if isinstance(remote, Mapping):
        value = remote.get("id") or remote.get("task_id")
        return str(value) if value else None
    return None


async def _price_book(
    store: CostStore,
    client: PricingClient,
    calls: Iterable[tuple[str, str, str]],
    providers: Mapping[str, str] | None,
) -> PriceBook:
    """The run's prices: those stored with it reused (a resumed run prices the same way), the rest
    of every (job, kind, model) priced by route fetched and stored.

    The look-ups go out together (they are an execution's first requests, before anything is sent:
    one after the other, each model's would add a round trip to the wait). Whichever fails first in
    (job, kind, model) order is the error raised, so it is the same on every try."""
    import asyncio

    book = PriceBook(lambda model, provider: fetch_pricing(client, model, provider))
    for model, provider, pricing in store.saved_prices():
        book.put(parse_pricing(pricing, model=model), provider)
    wanted: dict[tuple[str, str | None], str] = {}  # (model, provider) to fetch: the first job naming it
    for job, kind, model in sorted(set(calls)):
        if kind not in ROUTE_PRICED_KINDS or not model:
            continue
        provider = (providers or {}).get(job)
        if book.get(model, provider) is None:
            wanted.setdefault((model, provider), job)
    loads = [book.load(model, provider, job=job) for (model, provider), job in wanted.items()]
    answers = await asyncio.gather(*loads, return_exceptions=True)
    for (_, provider), answer in zip(wanted, answers, strict=True):
        if isinstance(answer, BaseException):
            raise answer
        if answer is not None:
            store.save_prices(answer, provider)
    return book


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
        book = await _price_book(store, client, calls, providers)
        # Calls an earlier execution left in flight (a crash, a kill): each may have been billed.
        store.reservations_to_unknown()
        spent, spent_by_job = store.spent()
        budgets = budgets or Budgets()
        # What the run's other stores (its shards, or the run's own store for a shard) spent counts too.
        elsewhere, elsewhere_by_job = spent_beside(run_dir, budgets)
        spent += elsewhere
        for job, usd in elsewhere_by_job.items():
            spent_by_job[job] = spent_by_job.get(job, Decimal(0)) + usd
        split = shard_split(run_dir)  # a shard's budgets are its 1/split share: its refusals say so
        # Each period's budget (execution, day, week, month) counts this store's calls in the period.
        caps = period_caps(budgets.periods, store.spent_since)
        budget = Budget(
            budgets.run_usd,
            budgets.job_usd,
            spent=spent,
            spent_by_job=spent_by_job,
            split=split,
            periods=caps,
        )
        unknown = store.unknown_spent()
    except BaseException:
        store.close()
        raise
    return RunSpendGuard(
        run_name or run_dir.name,
        store,
        book,
        budget,
        providers,
        unknown=unknown,
        elsewhere=elsewhere,
        elsewhere_by_job=elsewhere_by_job,
    )
