"""A budget held by the Prefect server: a run's, and each of its jobs', across its partitions on any
number of machines, and optionally an account's, across runs and days. Never exceeded, across
crashes and restarts.

The server keeps one global concurrency limit per budget (``relaybatch-budget:run:<run>``,
``relaybatch-budget:job:<run>:<job>``, ``relaybatch-budget:account:<name>``) whose slots are
money: one slot is ``UNIT_USD`` (a millionth of a dollar), the limit is the budget rounded down,
decay 0, no lease. Its active slots are what every process counts against it: charges, unknown
outcomes at their worst case, calls in flight at their worst case, and room a process has set
aside and not used yet. A job's budget counts that job's calls only.

Beside it, each store of the run (the run's own, each partition's) has a *holder* limit
(``<budget>:held-by:<store>``), and every change moves both in one request (Prefect's increment
and decrement take several names, all or none): the holder's active slots are exactly what that
store holds in the budget, kept by the server, not by the process. So whatever a process did when
it died, the next execution of its store knows what the store holds, and brings it to what the
store's cost ledger counts (``reconcile``): calls the dead process had in flight are unknown
outcomes in the ledger (counted at their worst case) and stay counted; room it had set aside
goes back. ``relaybatch resolve`` lowers what the ledger counts, and the next execution gives the
difference back.

A process does not ask the server for every call (the server takes tens of writes a second, and
a busy fleet sends hundreds of requests a second): it takes room for about ``block_calls`` worst
cases at a time and reserves each call from it (``allowance``); a call that settles below its
worst case leaves the difference there for the next ones. What it holds beyond its calls goes
back when the budget is nearly full (so another process may use it), when it has not asked for
room in a while, and when another process waits for room: a process with nothing in flight and no
room counts itself on ``<budget>:wanted`` (a plain counter, once a second while it waits), and
every process holding room reads it every ``IDLE_SECONDS``; when it moved, the holder gives back
what its calls do not need and takes room one call at a time for a while, so the room goes where
the work is instead of staying with whoever took it first. It also comes back when the execution
ends.
The order of every step leaves the server counting at least what the ledgers count: a crash
between two steps can leave room set aside that nobody uses (given back at the store's next
execution), never spend the server does not count. For the same reason the holder is never read
while a request of this store may still move it: the background give-back is not cancelled
half-way (``close`` waits for it), and after a give-back whose answer was lost to a timeout (it may
still reach the server), ``close`` leaves the holder as it is for ``LATE_REQUEST_SECONDS``
instead of reading it (read too early, the room would be given back twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from relaybatch.costs.guard import RunSpendGuard
from relaybatch.engine.spend import BilledCall, Refused, SpendFigures
from relaybatch.errors import UserError
from relaybatch.server_limits import (
    LATE_REQUEST_SECONDS,
    MAX_SLOTS,
    ServerLimits,
    Unreachable,
    may_land_later,
)

UNIT_USD = Decimal("0.000001")  # one slot of a budget's limit
PREFIX = "relaybatch-budget"
# After the server said it had no room: how long before it is asked again (a process's own
# settlements still make room in its allowance meanwhile).
FULL_RECHECK_SECONDS = 1.0
# Room a process has not asked for in this long goes back to the server (another may need it);
# also how often a process holding room looks whether another waits for some.
IDLE_SECONDS = 2.0
# After another process was seen waiting: how long room is taken one call at a time (no blocks).
LEAN_SECONDS = 2 * IDLE_SECONDS


def units_up(usd: Decimal) -> int:
    return int((usd / UNIT_USD).to_integral_value(rounding=ROUND_CEILING))


def units_down(usd: Decimal) -> int:
    return int((usd / UNIT_USD).to_integral_value(rounding=ROUND_FLOOR))


class FleetSettings(BaseSettings):
    """What the Prefect server holds for a fleet (``RELAYBATCH_SERVER_*``, docs/prefect.md)."""

    model_config = SettingsConfigDict(env_prefix="RELAYBATCH_SERVER_", extra="ignore")

    holds_run: bool = Field(
        default=False,
        description="Hold the run's budget and its caps on renders per model on the Prefect server "
        "for every execution (partitions planned with a server configured always do).",
    )
    account_budget_usd: Decimal | None = Field(
        default=None, gt=0, description="A budget for every run of the account together, across days."
    )
    account_name: str = Field(default="default", description="Which account budget (its limit's name).")
    budget_block_calls: int = Field(
        default=20, ge=1, description="Room taken from the server at a time, in worst cases of the call."
    )
    budget_wait_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long a process with nothing in flight waits for room to come back before it "
        "stops sending (other processes' calls settling, their room given back).",
    )


@dataclass(frozen=True)
class ServerBudgetSpec:
    """One budget on the server, as one store holds it."""

    scope: str  # "run", "job" or "account"
    key: str  # the run's name, "<run>:<job>", or the account's name
    budget_usd: Decimal
    holder: str  # the store: "<run>" or "<run>:part-3-of-12"
    job: str | None = None  # a job's budget: only that job's calls count against it

    def counts(self, job: str) -> bool:
        return self.job is None or self.job == job

    def counted(self, spent: tuple[Decimal, dict[str, Decimal]]) -> Decimal:
        """What a store counts against this budget, from its (run, per job) spend."""
        return spent[0] if self.job is None else spent[1].get(self.job, Decimal(0))

    def __post_init__(self) -> None:
        for text in (self.key, self.holder):
            if any(char in text for char in "/%&<>"):
                raise UserError(f"{self.scope} budget on the Prefect server: {text!r} may not hold / % & < >")
        if units_down(self.budget_usd) > MAX_SLOTS:
            most = MAX_SLOTS * UNIT_USD
            raise UserError(
                f"{self.describe}: more than the server's limit holds ({most} USD in millionths of a dollar)"
            )
        if units_down(self.budget_usd) < 1:
            raise UserError(f"{self.describe}: below a millionth of a dollar")

    @property
    def name(self) -> str:
        return f"{PREFIX}:{self.scope}:{self.key}"

    @property
    def holder_name(self) -> str:
        return f"{self.name}:held-by:{self.holder}"

    @property
    def wanted_name(self) -> str:
        return f"{self.name}:wanted"

    @property
    def describe(self) -> str:
        whose = f"job {self.job}'s" if self.job is not None else self.scope
        return f"{whose} budget of {self.budget_usd} USD held by the Prefect server ({self.name})"


@dataclass
class ServerBudget:
    """One budget on the server and what this store holds in it (module docstring)."""

    limits: ServerLimits
    spec: ServerBudgetSpec
    held: int = 0  # slots of the budget this store holds (its holder's active slots)
    used: Decimal = Decimal(0)  # what the store's ledger counts, in-flight reservations included
    set_aside: Decimal = Decimal(0)  # room promised to calls about to reserve
    short: bool = False  # the store's ledger counts more than the server could take
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    full_until: float = 0.0  # until then, the server is taken to have no room (FULL_RECHECK_SECONDS)
    lean_until: float = 0.0  # until then, room is taken one call at a time (another process waits)
    wanted_seen: int | None = None  # the ``wanted`` counter when last read
    wants: int = 0  # this store's own counts on ``wanted`` since it was last read
    wanted_at: float = 0.0  # when this store last counted itself on ``wanted``
    taken: int = 0  # requests that took room (figures for tests and benchmarks)
    reread_not_before: float = 0.0  # a give-back whose answer was lost may reach the server until then
    given_back: int = 0

    @property
    def allowance(self) -> Decimal:
        return self.held * UNIT_USD - self.used - self.set_aside

    async def open(self, counted: Decimal) -> None:
        """Create the budget's limits if missing (the budget's size set as the manifest says now),
        then bring what the store holds to what its ledger counts."""
        await self.limits.ensure(self.spec.name, units_down(self.spec.budget_usd))
        await self.limits.ensure(self.spec.holder_name, MAX_SLOTS)
        await self.limits.ensure(self.spec.wanted_name, MAX_SLOTS)
        self.used = counted
        await self.reconcile()

    async def reconcile(self) -> None:
        """What the store holds on the server becomes what it counts (rounded up): the surplus
        given back, a shortfall taken (refused when the budget has no room for it: then this
        store sends nothing more)."""
        async with self.lock:
            if time.monotonic() < self.reread_not_before:
                return  # the holder may still move: it counts more than the store, never less
            await self._reconcile()

    async def _reconcile(self) -> None:
        holder = await self.limits.read(self.spec.holder_name)
        held = holder.active_slots if holder else 0
        target = units_up(self.used + self.set_aside)
        self.short = False
        if held > target:
            self.held = target  # lower first: a failed request leaves the server counting more
            await self._give(held - target)
        elif held < target:
            if await self.limits.increment([self.spec.name, self.spec.holder_name], target - held):
                self.taken += 1
                held = target
            else:
                self.short = True
            self.held = held
        else:
            self.held = held

    async def seed(self, holder: str, counted: Callable[[], Decimal | None]) -> bool:
        """Count what another store of the run spent before the server held the budget (what its
        ledger file counts, read by ``counted`` only now), once: under a holder of its own, created
        with that count unless one exists already. The budget is raised first, so a crash in
        between leaves the server counting more, never less; a holder another process created
        first is theirs, and the raise is taken back. False when the budget has no room for it
        (nothing counted); True when counted, or nothing to count (no ledger file yet)."""
        name = f"{self.spec.name}:held-by:{holder}"
        if await self.limits.read(name) is not None:
            return True
        spent = counted()
        if spent is None:
            return True
        units = units_up(spent)
        if units and not await self.limits.increment([self.spec.name], units):
            self.short = True  # the run spent more than the budget has room for: nothing is sent
            return False
        if not await self.limits.create(name, MAX_SLOTS, units) and units:
            await self.limits.decrement([self.spec.name], units)
        return True

    async def make_room(self, need: Decimal, ask: Decimal) -> bool:
        """Room for ``need`` more than this store sets aside now: from its allowance, else taken
        from the server (up to ``ask``, at least ``need``), and set aside for the call at once (no
        other call can take it before its ``reserve``). False when the server has not got it."""
        async with self.lock:
            if self.short:
                return False
            if self.allowance >= need:
                self.set_aside += need
                return True
            if time.monotonic() < self.full_until:
                return False  # the server had no room a moment ago: not asked again yet
            for _ in range(5):  # another process took the room first: read again
                state = await self.limits.read(self.spec.name)
                if state is None:
                    raise UserError(f"{self.spec.describe}: its limit is gone from the server (deleted?)")
                if not state.active:
                    raise UserError(f"{self.spec.describe}: its limit is inactive on the server")
                room = state.limit - state.active_slots
                wanted = units_up(need - self.allowance)
                if room < wanted:
                    # Many workers wake at each settlement: the server is asked once a second.
                    self.full_until = time.monotonic() + FULL_RECHECK_SECONDS
                    return False
                lean = time.monotonic() < self.lean_until  # another process waits: no block
                slots = wanted if lean else max(wanted, min(room, units_up(ask - self.allowance)))
                if await self.limits.increment([self.spec.name, self.spec.holder_name], slots):
                    self.held += slots
                    self.taken += 1
                    self.set_aside += need
                    return True
            return False

    async def want(self) -> None:
        """Say on the server that this store waits for room (at most once a second): the stores
        holding room give back what their calls do not need (``others_want``)."""
        if time.monotonic() - self.wanted_at < FULL_RECHECK_SECONDS:
            return
        self.wanted_at = time.monotonic()
        if await self.limits.increment([self.spec.wanted_name], 1):  # full after 68 years of waits
            self.wants += 1

    async def others_want(self) -> bool:
        """Whether another store said it waits for room since this one last looked."""
        state = await self.limits.read(self.spec.wanted_name)
        if state is None:
            return False
        seen, mine = self.wanted_seen, self.wants
        self.wanted_seen, self.wants = state.active_slots, 0
        return seen is not None and state.active_slots - seen > mine

    async def give_back(self) -> None:
        """Room set aside and not promised to any call goes back to the server."""
        async with self.lock:
            spare = units_down(self.allowance)
            if spare <= 0:
                return
            self.held -= spare  # lower first: a failed request leaves the server counting more
            await self._give(spare)

    async def _give(self, slots: int) -> None:
        """Give ``slots`` back (``held`` already lowered by them)."""
        try:
            await self.limits.decrement([self.spec.name, self.spec.holder_name], slots)
        except BaseException as error:  # lost (or cancelled): it may still reach the server
            if may_land_later(error):
                self.reread_not_before = time.monotonic() + LATE_REQUEST_SECONDS
            raise
        self.given_back += 1

    async def counted_on_server(self) -> Decimal | None:
        state = await self.limits.read(self.spec.name)
        return None if state is None else state.active_slots * UNIT_USD


class ServerBudgetGuard:
    """The run's spend guard with budgets held by the Prefect server on top (module docstring):
    the engine's SpendGuard, ReportsSpend and SharedRoom. The local budgets (the run's own store,
    each job's, each period's) still apply; the server's are an extra gate."""

    def __init__(
        self,
        inner: RunSpendGuard,
        budgets: list[ServerBudget],
        limits: ServerLimits,
        settings: FleetSettings | None = None,
        sleep: Any = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.budgets = budgets
        self.limits = limits
        self.settings = settings or FleetSettings()
        self._sleep = sleep
        self._aside: dict[str, Decimal] = {}  # by call key: room set aside by room_for
        self._reserved: dict[str, Decimal] = {}  # by call key: worst case of a call in flight
        self._refusals: dict[str, Refused] = {}
        self._last_asked = time.monotonic()
        self._idle: asyncio.Task[None] | None = None

    @property
    def execution(self) -> int | None:
        return self.inner.execution

    @execution.setter
    def execution(self, value: int | None) -> None:
        self.inner.execution = value

    @property
    def store(self) -> Any:
        return self.inner.store

    async def open(self, others: dict[str, Callable[[str | None], Decimal | None]] | None = None) -> None:
        """Open each budget with what this store's ledger counts; ``others``: the run's other
        stores (holder -> what its ledger counts, for one job or all) that the run's budgets count
        once, if no process has counted them on the server yet (``ServerBudget.seed``)."""
        spent = self.inner.store.spent()
        for budget in self.budgets:
            counted = budget.spec.counted(spent)
            await _reachable(self.limits, lambda budget=budget, counted=counted: budget.open(counted))
            if budget.spec.scope == "account":
                continue
            for holder, read in (others or {}).items():
                of_job = functools.partial(read, budget.spec.job)
                await _reachable(self.limits, lambda b=budget, h=holder, c=of_job: b.seed(h, c))
        self._idle = asyncio.create_task(self._give_back_when_idle())

    def _of(self, call: BilledCall) -> list[ServerBudget]:
        """The budgets a call counts against: the run's, the account's, and its job's."""
        return [budget for budget in self.budgets if budget.spec.counts(call.job)]

    async def _give_back_when_idle(self) -> None:
        """Room this process took goes back to the server, where another process may need it: when
        it has not asked for any in IDLE_SECONDS (its work is all sent, or it waits for renders),
        and when another process says it waits for room (then, for LEAN_SECONDS, room is taken one
        call at a time)."""
        while True:
            await self._sleep(IDLE_SECONDS)
            idle = time.monotonic() - self._last_asked >= IDLE_SECONDS
            for budget in self.budgets:
                if idle and budget.allowance < UNIT_USD:
                    continue  # nothing to give back, and no block about to be taken
                with contextlib.suppress(Unreachable):
                    if await budget.others_want():
                        budget.lean_until = time.monotonic() + LEAN_SECONDS
                    elif not idle:
                        continue
                    if budget.allowance >= UNIT_USD:
                        await budget.give_back()

    async def close(self) -> None:
        """Give back what the store holds beyond what its ledger counts (calls still in flight
        stay counted at their worst case: they become unknown outcomes)."""
        if self._idle is not None:
            async with contextlib.AsyncExitStack() as held:  # a give-back under way ends first
                for budget in self.budgets:
                    await held.enter_async_context(budget.lock)
                self._idle.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle
        self.inner.commit()
        spent = self.inner.store.spent()
        for budget in self.budgets:
            budget.used, budget.set_aside = budget.spec.counted(spent), Decimal(0)
            # Unreachable: the store holds more than it counts until its next execution, never less.
            with contextlib.suppress(Unreachable):
                await budget.reconcile()

    # -- the shared room ---------------------------------------------------------------------

    async def room_for(self, call: BilledCall) -> Refused | None:
        # No new billed request while the server cannot be reached (docs/prefect.md), even with
        # room set aside: the request limit and the render cap live there too.
        await self.limits.reachable_again()
        self._last_asked = time.monotonic()
        budgets = self._of(call)
        earlier = self._aside.pop(call.key, None)
        if earlier is not None:  # asked before, and the engine stopped before reserving: asked anew
            for budget in budgets:
                budget.set_aside -= earlier
        if not budgets:  # only other jobs' budgets are held here: nothing to ask the server
            self._aside[call.key] = Decimal(0)
            return None
        worst = self.inner.worst_case(call)
        if worst is None:
            why = "its most it can cost is not known (no price for it), so no budget can admit it"
            return Refused(f"{budgets[0].spec.describe}: {call.job}/{call.item_id}: {why}", None)
        ask = worst * self.settings.budget_block_calls
        aside: list[ServerBudget] = []
        refused: Refused | None = None
        try:
            for budget in budgets:
                refused = await self._room_in(budget, worst, ask)
                if refused is not None:
                    break
                aside.append(budget)
        finally:
            if refused is not None or len(aside) < len(budgets):  # refused, or cancelled
                for budget in aside:
                    budget.set_aside -= worst
        if refused is None:
            self._aside[call.key] = worst
        return refused

    async def _room_in(self, budget: ServerBudget, worst: Decimal, ask: Decimal) -> Refused | None:
        waited_until: float | None = None
        while not await _reachable(self.limits, lambda: budget.make_room(worst, ask)):
            await _reachable(self.limits, budget.give_back)  # another process may fit in it
            if self._reserved:
                return Refused(await self._message(budget, worst), None, may_fit_later=True)
            # Nothing of ours in flight: room comes back only from other processes.
            await _reachable(self.limits, budget.want)
            if waited_until is None:
                waited_until = time.monotonic() + self.settings.budget_wait_seconds
            if time.monotonic() >= waited_until:
                return Refused(await self._message(budget, worst), None, may_fit_later=False)
            await self._sleep(1.0)
        return None

    async def _message(self, budget: ServerBudget, worst: Decimal) -> str:
        try:
            counted = await budget.counted_on_server()
        except Unreachable:
            counted = None
        where = "" if counted is None else f": {counted} USD counted there by every process"
        why = " (this store's ledger counts more than it had room for)" if budget.short else ""
        return (
            f"{budget.spec.describe} reached{where}{why} (charges, unknown outcomes and calls in flight at "
            f"their worst case, room set aside); this call may cost up to {worst} USD"
        )

    # -- the engine's seam -------------------------------------------------------------------

    def reserve(self, call: BilledCall) -> bool:
        aside = self._aside.pop(call.key, None)
        if aside is None:  # room_for was not asked: nothing set aside, so no room on the server
            self._refusals[call.key] = Refused("no room asked of the Prefect server", None, True)
            return False
        budgets = self._of(call)
        for budget in budgets:
            budget.set_aside -= aside
        if not self.inner.reserve(call):
            return False
        for budget in budgets:
            budget.used += aside
        self._reserved[call.key] = aside
        return True

    def refusal(self, call: BilledCall) -> Refused:
        own = self._refusals.pop(call.key, None)
        return own if own is not None else self.inner.refusal(call)

    def sending(self, call: BilledCall) -> None:
        self.inner.sending(call)

    def settle(self, call: BilledCall, result: dict[str, Any] | None) -> Decimal | None:
        cost, counted = self.inner.settle_counting(call, result)
        worst = self._reserved.pop(call.key, Decimal(0))
        for budget in self._of(call):
            budget.used += counted - worst
        return cost

    def release(self, call: BilledCall) -> None:
        self.inner.release(call)
        worst = self._reserved.pop(call.key, Decimal(0))
        for budget in self._of(call):
            budget.used -= worst

    def commit(self) -> None:
        self.inner.commit()

    def figures(self) -> SpendFigures:
        figures = self.inner.figures()
        run = next((budget for budget in self.budgets if budget.spec.scope == "run"), None)
        if figures.budget_usd is None and run is not None:
            return SpendFigures(
                figures.spent_usd, figures.unknown_usd, figures.reserved_usd, run.spec.budget_usd, 1
            )
        return figures

    def reserved_for(self, key: str) -> Decimal | None:
        return self.inner.reserved_for(key)

    def write_ledger(self) -> Any:
        return self.inner.write_ledger()


async def _reachable(limits: ServerLimits, step: Any) -> Any:
    """Run ``step`` (a coroutine function); while the server cannot be reached, wait for it and
    run it again (the caller's stop ends the wait)."""
    while True:
        try:
            return await step()
        except Unreachable:
            await limits.reachable_again()


def budget_specs(
    run_name: str,
    holder: str,
    run_usd: Decimal | None,
    settings: FleetSettings,
    job_usd: dict[str, Decimal] | None = None,
) -> list[ServerBudgetSpec]:
    """The budgets the server holds for an execution: the run's (when ``run_usd``), each job's in
    ``job_usd``, and the account's (when set)."""
    specs = []
    if run_usd is not None:
        specs.append(ServerBudgetSpec("run", run_name, run_usd, holder))
    for job, usd in sorted((job_usd or {}).items()):
        specs.append(ServerBudgetSpec("job", f"{run_name}:{job}", usd, holder, job))
    if settings.account_budget_usd is not None:
        specs.append(ServerBudgetSpec("account", settings.account_name, settings.account_budget_usd, holder))
    return specs


def fleet_settings() -> FleetSettings:
    """The RELAYBATCH_SERVER_* settings; a bad value is one line naming the variable."""
    from pydantic import ValidationError

    try:
        return FleetSettings()
    except ValidationError as error:
        problems = "; ".join(
            f"RELAYBATCH_SERVER_{'__'.join(str(part) for part in problem['loc']).upper()}: "
            f"{problem['msg'].removeprefix('Value error, ')}"
            for problem in error.errors()
        )
        raise UserError(f"setting {problems} (fix or unset the variable)") from None
