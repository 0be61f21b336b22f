"""The spend seam: how the costs package guards and records money around each billed call.

The engine calls ``reserve`` before every billed submission. False: the budget says no, and
``refusal`` says why and what to do. When only reservations of calls in flight stood in the way
(``may_fit_later``: each settles at or below its worst case, so room may come back), the engine
waits for one of them to settle and asks again; otherwise a refusal by the job's own budget stops
only that job, a refusal by the run's budget stops the run's submissions (the item stays pending
either way). Once the limiter's token is taken, ``sending`` says the call is about to leave.
After an admitted ``reserve`` comes exactly one of ``settle`` (the call was or may have been
charged; ``result`` is None when the outcome is unknown) or ``release`` (the call was definitely
not charged, or never left). ``settle`` returns the item's cost when it can price it; the engine
stores it in the item's ``cost_usd`` column and adds it to the dollars shown on the progress line.
``commit`` runs just before every checkpoint commit, so what ``settle`` recorded is durable no
later than the item state that follows from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class BilledCall:
    """What the spend guard needs to know about one billed call."""

    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]
    attempt: int
    # Send-to-answer of the request that was answered (docs/costs.md); set once it is known.
    latency_ms: float | None = None
    # A structured answer that did not fit its schema and was asked again (or given up on): its
    # charge is spend that bought nothing, shown apart from the useful spend (ledger ``wasted``).
    wasted: bool = False


@dataclass(frozen=True)
class Refused:
    """Why ``reserve`` refused a call, as the engine acts on it."""

    message: str  # for the user: which budget, spent, in flight, what the call may cost
    job: str | None  # the job whose own budget refused it (only that job holds); None: the run's
    # Only reservations of calls in flight stood in the way: wait for one to settle, ask again.
    may_fit_later: bool = False


class SpendGuard(Protocol):
    def reserve(self, call: BilledCall) -> bool:
        """Hold the call's estimated cost against the budget; False refuses the call."""

    def sending(self, call: BilledCall) -> None:
        """The admitted call is about to leave (its limiter token taken): its reservation becomes
        durable with the next ``commit``, no later than the item's ``sending``. Until then a
        call waiting at the limit leaves nothing behind if the process dies."""

    def settle(self, call: BilledCall, result: dict[str, Any] | None) -> Decimal | None:
        """The call was (or may have been) charged: turn its reservation into spend."""

    def release(self, call: BilledCall) -> None:
        """The call was not charged: give its reservation back."""

    def commit(self) -> None:
        """Make what ``settle`` recorded durable; called just before each checkpoint commit."""

    def refusal(self, call: BilledCall) -> Refused:
        """Why ``reserve`` just refused ``call`` (asked right after, once per refusal)."""


@runtime_checkable
class SharedRoom(Protocol):
    """A spend guard whose budget is also held outside this process (the Prefect server,
    relaybatch/fleet/budget.py). The engine awaits ``room_for`` before each ``reserve``, with no
    other await in between: None, room for the call's worst case is set aside for that ``reserve``;
    a Refused, not now (``may_fit_later``: one of its own calls in flight may settle below
    its worst case and make room). It may wait (for the server to answer again), and a stop ends
    the wait."""

    async def room_for(self, call: BilledCall) -> Refused | None: ...


@dataclass(frozen=True)
class SpendFigures:
    """Money against the run's budget, for the progress display: charges known, calls whose
    outcome is unknown (counted at their worst case), reservations of calls in flight."""

    spent_usd: Decimal
    unknown_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal | None
    # A shard's execution holds 1/shards of the run's budget (its spend counts the run's other
    # stores' share, docs/costs.md); 1 for the run's own store.
    shards: int = 1
    # Each period budget (execution, day, week, month) as the live line shows it: its name as a
    # person reads it, its limit and what counts against it now (spent in the period and held).
    periods: tuple[tuple[str, Decimal, Decimal], ...] = ()
    # Of ``spent_usd``, what the run's other stores spent (a shard's budget counts it): the store's
    # own spend is the difference (its progress file, run/progress_file.py).
    elsewhere_usd: Decimal = Decimal(0)
    # Each job budget enforced here, less what the run's other stores spent on that job: the most
    # this store's own calls of the job can reach in this execution (``ceiling_usd``, per job).
    job_ceilings: tuple[tuple[str, Decimal], ...] = ()

    @property
    def ceiling_usd(self) -> Decimal | None:
        """The most this store's own spend (known, unknown at its worst case, in flight) can reach
        in this execution under the run budget it enforces (its limit less what the run's other
        stores spent, as counted at the start); None without one. The run's other stores count
        it for an execution going on, whose figures they see only every few seconds
        (costs/run_budgets.py ``folder_spent``)."""
        return None if self.budget_usd is None else self.budget_usd - self.elsewhere_usd


@runtime_checkable
class ReportsSpend(Protocol):
    """A spend guard that can say where the run stands against its budget."""

    def figures(self) -> SpendFigures: ...
