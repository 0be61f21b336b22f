"""Read-only views of a run: items per state, spend so far, progress. Built on CheckpointStore.

Every view opens its stores read-only, so it can follow a running engine (WAL lets readers in
while the engine writes) and can never take a write lock beside it. A view over several stores
(a run and its shards) adds them up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from relaybatch.engine.store import CheckpointStore

if TYPE_CHECKING:
    from relaybatch.cost_model import Budgets
    from relaybatch.costs.report import RunSpend
    from relaybatch.costs.run_budgets import BudgetUse


@dataclass(frozen=True)
class SpendLine:
    job: str
    model: str
    usd: Decimal  # known spend
    unknown_usd: Decimal = Decimal(0)  # worst case held for calls of unknown cost or outcome

    @property
    def total_usd(self) -> Decimal:
        return self.usd + self.unknown_usd

    def row(self) -> dict[str, str]:
        """A table artifact's row: exact decimals as text."""
        usd = {"known_usd": self.usd, "unknown_usd": self.unknown_usd, "total_usd": self.total_usd}
        return {"job": self.job, "model": self.model} | {name: str(value) for name, value in usd.items()}


@contextlib.contextmanager
def reading(checkpoint: Path) -> Iterator[CheckpointStore]:
    """A checkpoint store opened read-only, closed on exit."""
    store = CheckpointStore.open_read_only(checkpoint)
    try:
        yield store
    finally:
        store.close()


def counts_per_job(checkpoints: Iterable[Path]) -> dict[str, dict[str, int]]:
    """Items per job and state, added up over every store given."""
    per_job: dict[str, dict[str, int]] = {}
    for checkpoint in checkpoints:
        with reading(checkpoint) as store:
            for job, counts in store.count_by_job_and_state().items():
                for state, count in counts.items():
                    per_job.setdefault(job, {})[state] = per_job.get(job, {}).get(state, 0) + count
    return per_job


def counts(checkpoints: Iterable[Path]) -> dict[str, int]:
    """Items per state, added up over every store given."""
    totals: dict[str, int] = {}
    for per_state in counts_per_job(checkpoints).values():
        for state, count in per_state.items():
            totals[state] = totals.get(state, 0) + count
    return totals


def spend_lines(store_dirs: Iterable[Path]) -> list[SpendLine]:
    """Spend per (job, model), largest first, from the cost ledger of each store folder given (a
    run's folder, a shard's): the figures `relaybatch report` shows, unknown outcomes included."""
    from relaybatch.costs.report import RunSpend, add_ledger

    spend = RunSpend([])
    for folder in store_dirs:
        add_ledger(spend, folder, export=False)  # a running execution may be writing its Parquet
    lines = [
        SpendLine(job, model, line.usd, line.unknown_usd)
        for line in spend.by("job", "model")
        for job, model in [line.key]
    ]
    return sorted(lines, key=lambda line: (-line.total_usd, line.job, line.model))


def total_spend(lines: Iterable[SpendLine]) -> Decimal:
    """Known + unknown (worst case): what the budget counts as spent."""
    return sum((line.total_usd for line in lines), Decimal(0))


@dataclass(frozen=True)
class MoneyLine:
    """One job's spend (or the run's, ``job`` None) beside its budget, when it has one."""

    job: str | None
    known_usd: Decimal
    unknown_usd: Decimal  # worst case held for calls of unknown cost or outcome, in flight included
    budget: BudgetUse | None

    @property
    def total_usd(self) -> Decimal:
        """Known + unknown (worst case): what the budget counts as spent."""
        return self.known_usd + self.unknown_usd


@dataclass(frozen=True)
class RunMoney:
    """A run's money now, from its cost stores opened read-only (the run's own and its shards'),
    beside its budgets (the run's once, each job's beside that job's spend)."""

    spend: RunSpend
    budgets: Budgets
    shards: int  # shard folders read beside the run's own

    def lines(self) -> list[MoneyLine]:
        """One line per job that spent or has a budget, then the run's."""
        from relaybatch.costs.run_budgets import BudgetUse

        name, job_budgets = self.spend.runs[0], self.budgets.job_usd or {}

        def line(job: str | None, known: Decimal, unknown: Decimal, budget: Decimal | None) -> MoneyLine:
            use = None if budget is None else BudgetUse(name, job, known + unknown, budget)
            return MoneyLine(job, known, unknown, use)

        spent = {spend.key[0]: spend for spend in self.spend.by("job")}
        lines = [
            line(job, spent[job].usd, spent[job].unknown_usd, job_budgets.get(job))
            if job in spent
            else line(job, Decimal(0), Decimal(0), job_budgets[job])
            for job in sorted(spent.keys() | job_budgets.keys())
        ]
        lines.append(line(None, self.spend.known_usd, self.spend.unknown_usd, self.budgets.run_usd))
        return lines


def run_money(run_dir: Path) -> RunMoney:
    """The money of the run at ``run_dir`` (a run's folder; its shard folders are read too): every
    cost store opened read-only, so it can follow a running execution. No cost store yet: nothing
    spent yet."""
    from relaybatch.costs.report import JOB_COLUMNS, run_spend_figures, store_folders
    from relaybatch.costs.run_budgets import run_budgets

    spend = run_spend_figures(run_dir, export=False, columns=JOB_COLUMNS)
    return RunMoney(spend, run_budgets(run_dir), len(store_folders(run_dir)) - 1)


def items_per_job_and_state(checkpoints: Iterable[Path]) -> list[dict[str, object]]:
    """One row per job with a column per state (a table for a report or an artifact)."""
    per_job = counts_per_job(checkpoints)
    states = sorted({state for per_state in per_job.values() for state in per_state})
    return [
        {"job": job, **{state: per_state.get(state, 0) for state in states}, "total": sum(per_state.values())}
        for job, per_state in sorted(per_job.items())
    ]


@dataclass(frozen=True)
class Failure:
    state: str
    reason: str
    items: int
    example: str


def failures(checkpoints: Iterable[Path]) -> list[Failure]:
    """Failed and uncertain items grouped by state and reason, most frequent first, with one item key."""
    items: dict[tuple[str, str], int] = {}
    examples: dict[tuple[str, str], str] = {}
    for checkpoint in checkpoints:
        if not checkpoint.exists():
            continue
        with reading(checkpoint) as store:
            for state, reason, count, key in store.failure_reasons():
                items[(state, reason)] = items.get((state, reason), 0) + count
                examples.setdefault((state, reason), key)
    ranked = sorted(items, key=lambda group: (-items[group], group))
    return [
        Failure(state, reason, items[(state, reason)], examples[(state, reason)]) for state, reason in ranked
    ]


def error_type(reason: str | None) -> str:
    """The kind of an error message: "429 rate_limit_error" of "429 rate_limit_error: slow down"."""
    text = (reason or "no reason recorded").split(":", 1)[0].strip()
    return text[:60] or "no reason recorded"


def errors_by_type(checkpoints: Iterable[Path]) -> dict[str, int]:
    """Failed and uncertain items per "<state>: <error type>"."""
    totals: dict[str, int] = {}
    for failure in failures(checkpoints):
        name = f"{failure.state}: {error_type(failure.reason)}"
        totals[name] = totals.get(name, 0) + failure.items
    return totals
