"""Budgets that hold: reserve a call's worst case before it is sent, settle it when it is known.

A call is admitted only if, for the run, for its job and for each period budget (this execution,
this calendar day, week or month: relaybatch/cost_model/periods.py),
    spent + reserved in flight + this call's worst case <= budget.
Since a call is never charged more than its worst case, the budget is never crossed, however
many calls are in flight. Settling replaces the reservation with the actual charge; releasing
(a call that was not charged) drops it. All three take one lock and never wait inside it, so a
Budget can be shared by threads and by the tasks of one event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from relaybatch.cost_model.periods import PeriodBudgets, PeriodCap, fresh_advice

RUN_SCOPE = "run"
# A shard's share times its split gives the whole back to within this (10 / 3 * 3 = 9.999...9).
_WHOLE_QUANTUM = Decimal("1e-12")


def whole_of_share(share: Decimal, split: int) -> Decimal:
    """The run's budget from one shard's 1/``split`` share of it, as the user gave it."""
    return (share * split).quantize(_WHOLE_QUANTUM).normalize()


def projected_total(spent: Decimal, settled_items: int, open_items: int) -> Decimal | None:
    """The run's projected total: what it spent, plus each item still open at the mean cost of the
    items settled so far (spent + remaining x observed mean); None before any item settled."""
    if settled_items <= 0:
        return None
    return spent + open_items * spent / settled_items


def projection_warning(projected: Decimal | None, budget: Decimal | None) -> str | None:
    """Said early, while the run goes: the budget will not cover what the answers so far project."""
    if projected is None or budget is None or projected <= budget:
        return None
    return (
        f"at the cost of the answers so far the run will need about ${projected:.4f}, more than its "
        f"${budget} budget: it will stop before the end unless the budget is raised (--budget)"
    )


@dataclass(frozen=True)
class Budgets:
    """The limits a run was given (USD; None = no limit): the run's and each job's."""

    run_usd: Decimal | None = None
    job_usd: Mapping[str, Decimal] | None = None
    periods: PeriodBudgets | None = None  # each execution, day, week, month


@dataclass(frozen=True)
class Reservation:
    key: str
    job: str
    usd: Decimal


@dataclass(frozen=True)
class Refusal:
    """Why a call was not admitted: the scope whose budget it would cross, and by how much."""

    scope: str  # RUN_SCOPE or "job NAME"
    limit: Decimal
    spent: Decimal
    in_flight: Decimal
    needed: Decimal | None  # None: the call's worst case could not be priced
    split: int = 1  # a shard of a run split N ways enforces 1/N of each budget
    period: str | None = None  # a period budget's period (execution, day, week, month)

    @property
    def whole_run(self) -> bool:
        """A budget over every job (the run's, or a period's): reaching it stops all new work."""
        return not self.scope.startswith("job ")

    @property
    def named(self) -> str:
        """The budget as the user gave it: a shard's limit is named as its share of the run's."""
        if self.split == 1:
            return f"{self.scope} budget of {self.limit} USD"
        whole = whole_of_share(self.limit, self.split)
        return f"{self.scope} budget (this shard's 1/{self.split} share of {whole} USD: {self.limit} USD)"

    @property
    def only_in_flight(self) -> bool:
        """True when the call would fit once the calls in flight settle below their worst case."""
        return self.needed is not None and self.spent + self.needed <= self.limit and self.in_flight > 0

    def message(self, item: str) -> str:
        if self.needed is None:
            return (
                f"budget: the cost of item {item} cannot be bounded (a price it needs is unknown), "
                f"so it was not sent under the {self.named}"
            )
        if self.only_in_flight:
            return (
                f"{self.named}: {self.spent} USD spent and {self.in_flight} USD "
                f"held for calls in flight, so item {item} (up to {self.needed} USD) was not sent. "
                f"Run the manifest again to go on with what the calls in flight did not use; "
                f"nothing already done is re-sent."
            )
        advice = (
            "Raise budget_usd and run the manifest again to resume; nothing already done is re-sent."
            if self.period is None
            else fresh_advice(self.period)
        )
        return (
            f"{self.named} reached: {self.spent} USD spent, "
            f"{self.in_flight} USD in flight, item {item} may cost up to {self.needed} USD. {advice}"
        )


class Budget:
    """Run and per-job limits in USD (None = no limit), with spend and reservations in flight."""

    def __init__(
        self,
        run_limit: Decimal | None = None,
        job_limits: Mapping[str, Decimal] | None = None,
        *,
        spent: Decimal = Decimal(0),
        spent_by_job: Mapping[str, Decimal] | None = None,
        split: int = 1,
        periods: Sequence[PeriodCap] = (),
    ) -> None:
        self.run_limit = run_limit
        self.periods = list(periods)
        self._spent_at_start = spent  # this execution's spend is what grew since
        self.split = split  # the limits are a shard's 1/split share of the run's
        self.job_limits = dict(job_limits or {})
        self._lock = threading.Lock()
        self._spent = spent
        self._spent_by_job: dict[str, Decimal] = dict(spent_by_job or {})
        self._reservations: dict[str, Reservation] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def limits(self, job: str) -> list[tuple[str, Decimal]]:
        scopes = [(RUN_SCOPE, self.run_limit), (f"job {job}", self.job_limits.get(job))]
        return [(scope, limit) for scope, limit in scopes if limit is not None]

    def is_limited(self, job: str) -> bool:
        return bool(self.limits(job)) or bool(self.periods)

    def _in_flight(self, job: str | None) -> Decimal:
        return sum((r.usd for r in self._reservations.values() if job is None or r.job == job), Decimal(0))

    def _refusal(self, job: str, needed: Decimal | None) -> Refusal | None:
        for scope, limit in self.limits(job):
            spent = self._spent if scope == RUN_SCOPE else self._spent_by_job.get(job, Decimal(0))
            in_flight = self._in_flight(None if scope == RUN_SCOPE else job)
            if needed is None or spent + in_flight + needed > limit:
                return Refusal(scope, limit, spent, in_flight, needed, self.split)
        for cap in self.periods:
            spent, in_flight = self._period_spent(cap), self._in_flight(None)
            if needed is None or spent + in_flight + needed > cap.limit:
                return Refusal(cap.name, cap.limit, spent, in_flight, needed, self.split, cap.period)
        return None

    def reserve(self, key: str, job: str, worst_usd: Decimal | None) -> Refusal | None:
        """Admit a call (None) or say why not. ``worst_usd`` None = unbounded: refused under a limit."""
        refusal, _ = self._reserve(key, job, worst_usd, wait=False)
        return refusal

    async def reserve_when_possible(self, key: str, job: str, worst_usd: Decimal | None) -> Refusal | None:
        """Like ``reserve``, but when only calls in flight stand in the way, wait for them to settle."""
        while True:
            refusal, settled = self._reserve(key, job, worst_usd, wait=True)
            if settled is None:
                return refusal
            await settled

    def _reserve(
        self, key: str, job: str, worst_usd: Decimal | None, *, wait: bool
    ) -> tuple[Refusal | None, asyncio.Future[None] | None]:
        with self._lock:
            if key in self._reservations:
                return None, None
            refusal = self._refusal(job, worst_usd)
            if refusal is None:
                self._reservations[key] = Reservation(key, job, worst_usd or Decimal(0))
                return None, None
            if not (wait and refusal.only_in_flight):
                return refusal, None
            # Registered under the lock that settle takes: a settle cannot slip in unnoticed.
            settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(settled)
            return refusal, settled

    def settle(self, key: str, job: str, actual_usd: Decimal) -> None:
        """The call was charged ``actual_usd``: it replaces the reservation in the spend."""
        with self._lock:
            self._reservations.pop(key, None)
            self._spent += actual_usd
            self._spent_by_job[job] = self._spent_by_job.get(job, Decimal(0)) + actual_usd
            waiters, self._waiters = self._waiters, []
        _wake(waiters)

    def release(self, key: str) -> None:
        """The call was not charged (refused before processing, or never sent)."""
        with self._lock:
            self._reservations.pop(key, None)
            waiters, self._waiters = self._waiters, []
        _wake(waiters)

    @property
    def spent(self) -> Decimal:
        with self._lock:
            return self._spent

    def spent_by_job(self) -> dict[str, Decimal]:
        with self._lock:
            return dict(self._spent_by_job)

    @property
    def in_flight(self) -> Decimal:
        with self._lock:
            return self._in_flight(None)

    def period_use(self) -> list[tuple[PeriodCap, Decimal]]:
        """Each period budget with what counts against it now, as ``_refusal`` counts it: spent in
        the period, plus the worst cases held in flight."""
        with self._lock:
            in_flight = self._in_flight(None)
            return [(cap, self._period_spent(cap) + in_flight) for cap in self.periods]

    def _period_spent(self, cap: PeriodCap) -> Decimal:
        """Spent in the cap's period: before this execution, and by it since."""
        return cap.spent_before + self._spent - self._spent_at_start

    def in_flight_for(self, job: str | None) -> Decimal:
        """Worst cases held for the job's calls in flight (None: every job's)."""
        with self._lock:
            return self._in_flight(job)


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    """Wake waiting reservations on their own loops (settle may run on another thread)."""
    for future in waiters:
        loop = future.get_loop()
        if not loop.is_closed():
            loop.call_soon_threadsafe(_finish, future)
