"""Period budgets as people read them: `relaybatch status` (each cap beside what its period spent
and what is left) and `relaybatch plan` (each cap beside the plan's worst case). The periods'
arithmetic is relaybatch/cost_model/periods.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from relaybatch.cost_model.periods import EXECUTION, PERIODS, PeriodBudgets, period_caps


def period_uses(
    periods: PeriodBudgets | None,
    spent_since: Any,
    last_execution_usd: Decimal | None,
    now: datetime | None = None,
) -> list[str]:
    """Each period budget beside what its period spent and what is left, as `relaybatch status`
    shows them (the execution budget beside the last execution's spend; the next starts whole)."""
    from relaybatch.costs.report import display_usd

    lines = []
    for cap in period_caps(periods, spent_since, now):
        if cap.period == EXECUTION:
            spent = last_execution_usd or Decimal(0)
            lines.append(
                f"budget per execution {display_usd(cap.limit)}: the last execution spent "
                f"{display_usd(spent)} ({display_usd(max(cap.limit - spent, Decimal(0)))} left of it); "
                f"the next starts with {display_usd(cap.limit)}"
            )
        else:
            left = max(cap.limit - cap.spent_before, Decimal(0))
            lines.append(
                f"budget per {cap.period} {display_usd(cap.limit)}: {cap.name} spent "
                f"{display_usd(cap.spent_before)}, {display_usd(left)} left"
            )
    return lines


def period_plan_lines(periods: Mapping[str, Decimal], timezone: str, worst_usd: Decimal) -> list[str]:
    """`relaybatch plan`: each period budget, and whether it covers the plan's worst case (if not,
    the work takes more than one execution or period: each stops at its budget, the next goes on)."""
    lines = []
    for period in PERIODS:
        limit = periods.get(period)
        if limit is None:
            continue
        where = "" if period == EXECUTION else f" (calendar {period} in {timezone})"
        if worst_usd <= limit:
            verdict = "which covers the worst case"
        else:
            verdict = f"which is BELOW the worst case: the work may take more than one {period}"
        lines.append(f"budget per {period}{where}: {limit} USD, {verdict}")
    return lines
