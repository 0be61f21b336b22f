"""Budgets per period: each execution, each calendar day, week or month, besides the run's life.

A nightly run with ``budget_per_day_usd: "5"`` may spend at most 5 USD of calls made in one
calendar day, in the run's time zone (``budget_timezone``, UTC by default); the next day starts
fresh. ``budget_per_execution_usd`` caps each execution (a CLI run, a flow run, a scheduled night)
whatever the day. Weeks start on Monday (ISO), months on the first. A period budget holds as the
run's does (relaybatch/costs/budget.py): a call is admitted only when the period's spend, the calls
in flight and its worst case fit, so a capped night stops like a budget stop, resumable, and the
next execution (or day) starts fresh. The period is the one the execution started in: an execution
that runs past midnight keeps counting against the day it started.

What a period has spent is read from the cost store's rows by their ``charged_at`` (calls made on
or after the period's start, at what the budget counts: the charge, or the worst case of an unknown
outcome); an execution's own spend starts at zero. The arithmetic is here, below the engine
(cost_model/budget.py enforces the caps); the run's stored budgets and what `status` and `plan`
show of them are in relaybatch/costs (run_budgets.py, periods.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

EXECUTION, DAY, WEEK, MONTH = "execution", "day", "week", "month"
PERIODS = (EXECUTION, DAY, WEEK, MONTH)
# The manifest's run settings naming each period's budget.
SETTING_OF = {period: f"budget_per_{period}_usd" for period in PERIODS}


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (ValueError, with what to write, when there is none)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a path
        raise ValueError(
            f"unknown time zone {name!r}: use an IANA name such as UTC or Europe/Paris"
        ) from None


@dataclass(frozen=True)
class PeriodBudgets:
    """USD each execution and each calendar day, week and month may spend (None = no limit)."""

    limits: Mapping[str, Decimal]
    timezone: str = "UTC"

    def __bool__(self) -> bool:
        return bool(self.limits)

    def to_json(self, share: Decimal = Decimal(1)) -> dict[str, Any]:
        return {
            "limits": {period: str(usd / share) for period, usd in self.limits.items()},
            "timezone": self.timezone,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> PeriodBudgets | None:
        if not value or not value.get("limits"):
            return None
        limits = {period: Decimal(usd) for period, usd in value["limits"].items()}
        return cls(limits, value.get("timezone") or "UTC")

    def scaled(self, factor: Decimal) -> PeriodBudgets:
        return PeriodBudgets({period: usd * factor for period, usd in self.limits.items()}, self.timezone)


def period_start(period: str, now: datetime, timezone: str = "UTC") -> datetime:
    """When the calendar ``period`` (day, week, month) holding ``now`` began, in UTC."""
    local = now.astimezone(zone(timezone))
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == WEEK:
        midnight -= timedelta(days=local.weekday())
    elif period == MONTH:
        midnight = midnight.replace(day=1)
    elif period != DAY:
        raise ValueError(f"{period!r} is not a calendar period")
    # Re-localised: the day's midnight may have another UTC offset than ``now`` (summer time).
    return midnight.replace(tzinfo=None).replace(tzinfo=zone(timezone)).astimezone(UTC)


def period_name(period: str, now: datetime, timezone: str = "UTC") -> str:
    """The period as a person reads it: ``day 2026-11-26 (UTC)``, ``week from 2026-11-23 (UTC)``,
    ``month 2026-11 (Europe/Paris)``, or ``execution``."""
    if period == EXECUTION:
        return EXECUTION
    local = period_start(period, now, timezone).astimezone(zone(timezone))
    when = {
        DAY: local.date().isoformat(),
        WEEK: f"from {local.date().isoformat()}",
        MONTH: local.strftime("%Y-%m"),
    }
    return f"{period} {when[period]} ({timezone})"


def since_text(moment: datetime) -> str:
    """A UTC time as the ledger's ``charged_at`` text, for comparing with it."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def fresh_advice(period: str) -> str:
    """What a person does when a period's budget stopped work: nothing, the next period is fresh."""
    if period == EXECUTION:
        return "The next execution starts with its whole budget; nothing already done is re-sent."
    return f"The next {period} starts fresh (run again then); nothing already done is re-sent."


@dataclass(frozen=True)
class PeriodCap:
    """One period's budget as an execution enforces it: what the period spent before it began."""

    period: str  # one of PERIODS
    name: str  # period_name
    limit: Decimal
    spent_before: Decimal = Decimal(0)


def period_caps(
    periods: PeriodBudgets | None, spent_since: Any, now: datetime | None = None
) -> list[PeriodCap]:
    """The caps an execution starting ``now`` enforces; ``spent_since(iso)`` gives what the run's
    calls made on or after a time count (CostStore.spent_since)."""
    if not periods:
        return []
    now = now or datetime.now(UTC)
    caps = []
    for period in PERIODS:
        limit = periods.limits.get(period)
        if limit is None:
            continue
        before = (
            Decimal(0)
            if period == EXECUTION
            else spent_since(since_text(period_start(period, now, periods.timezone)))
        )
        caps.append(PeriodCap(period, period_name(period, now, periods.timezone), limit, before))
    return caps
