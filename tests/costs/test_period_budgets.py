"""Budgets per execution and per calendar day, week and month (relaybatch/costs/periods.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from relaybatch.cost_model import Budget
from relaybatch.cost_model.periods import PeriodBudgets, PeriodCap, period_caps, period_name, period_start

if TYPE_CHECKING:
    from tests.conftest import Cli

D = Decimal
NOW = datetime(2026, 11, 26, 1, 30, tzinfo=UTC)  # a Thursday; 02:30 in Paris


def test_a_period_starts_at_its_local_midnight() -> None:
    assert period_start("day", NOW) == datetime(2026, 11, 26, tzinfo=UTC)
    assert period_start("week", NOW) == datetime(2026, 11, 23, tzinfo=UTC)  # Monday
    assert period_start("month", NOW) == datetime(2026, 11, 1, tzinfo=UTC)
    assert period_start("day", NOW, "Europe/Paris") == datetime(2026, 11, 25, 23, tzinfo=UTC)
    assert period_start("day", NOW, "America/New_York") == datetime(2026, 11, 25, 5, tzinfo=UTC)
    assert period_name("day", NOW, "America/New_York") == "day 2026-11-25 (America/New_York)"
    assert period_name("week", NOW) == "week from 2026-11-23 (UTC)"
    assert period_name("month", NOW) == "month 2026-11 (UTC)"


def test_a_period_counts_what_it_spent_before_and_what_this_execution_spends() -> None:
    asked: list[str] = []

    def spent_since(since: str) -> Decimal:
        asked.append(since)
        return D("0.30")

    caps = period_caps(PeriodBudgets({"execution": D("0.50"), "day": D("1.00")}), spent_since, NOW)
    assert asked == ["2026-11-26T00:00:00.000000+00:00"]
    assert [(cap.period, cap.spent_before) for cap in caps] == [("execution", 0), ("day", D("0.30"))]

    budget = Budget(spent=D("7"), periods=caps)  # 7 USD spent by the run before (other days)
    assert budget.reserve("a", "job", D("0.45")) is None
    # The live line's figures count as the refusal does: the worst case held counts while in flight.
    assert [(cap.period, used) for cap, used in budget.period_use()] == [
        ("execution", D("0.45")),
        ("day", D("0.75")),
    ]
    budget.settle("a", "job", D("0.45"))
    assert [used for _, used in budget.period_use()] == [D("0.45"), D("0.75")]
    refusal = budget.reserve("b", "job", D("0.10"))
    assert refusal is not None and refusal.whole_run and refusal.scope == "execution"
    message = refusal.message("job/b")
    assert "execution budget of 0.50 USD reached: 0.45 USD spent" in message
    assert "The next execution starts with its whole budget" in message and "Raise" not in message


def test_a_day_budget_stops_at_what_the_day_has_left() -> None:
    caps = [PeriodCap("day", "day 2026-11-26 (UTC)", D("1.00"), D("0.95"))]
    refusal = Budget(periods=caps).reserve("a", "job", D("0.10"))
    assert refusal is not None
    assert "day 2026-11-26 (UTC) budget of 1.00 USD reached: 0.95 USD spent" in refusal.message("job/a")
    assert "The next day starts fresh" in refusal.message("job/a")


def write_nightly(folder: Path, rows: int, cap: str) -> Path:
    lines = ["id,prompt"] + [f"p{n},Summarise paragraph {n}." for n in range(rows)]
    (folder / "rows.csv").write_text("\n".join(lines) + "\n")
    manifest = folder / "capped.yaml"
    manifest.write_text(
        "run:\n"
        f'  budget_per_execution_usd: "{cap}"\n'
        "  concurrency: 1\n"
        "jobs:\n"
        "  - name: notes\n"
        "    kind: chat\n"
        "    model: relay-chat-small\n"
        "    data: rows.csv\n"
        "    prompt: '{prompt}'\n"
        "    request: {max_tokens: 16}\n"
    )
    return manifest


def test_a_capped_execution_stops_and_the_next_starts_fresh(tmp_path: Path, cli: Cli) -> None:
    run = cli
    runs = str(tmp_path / "runs")
    # One chat's worst case is about 0.000026 USD and its charge about 0.000011: one call fits
    # under the cap, the next one's worst case does not.
    manifest = write_nightly(tmp_path, 6, "0.00003")
    code, plan = run("plan", str(manifest))
    assert code == 0 and "budget per execution: 0.00003 USD" in plan

    code, first = run("run", str(manifest), "--runs-dir", runs)
    assert "stopped: execution budget of 0.00003 USD reached" in first and "1 requests sent" in first
    code, second = run("run", str(manifest), "--runs-dir", runs)
    assert "stopped: execution budget of 0.00003 USD reached" in second and "1 requests sent" in second

    ledger = pq.read_table(tmp_path / "runs" / "capped" / "ledger.parquet").to_pylist()
    per_execution: dict[int, Decimal] = {}
    for row in ledger:
        per_execution[row["execution"]] = per_execution.get(row["execution"], D(0)) + row["usd"]
    assert sorted(per_execution) == [1, 2]  # the second execution sent again: it started fresh
    assert all(0 < spent <= D("0.00003") for spent in per_execution.values())

    code, status = run("status", "capped", "--runs-dir", runs)
    assert code == 0 and "budget per execution $0.000030: the last execution spent" in status
