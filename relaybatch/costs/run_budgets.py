"""A run's budgets as its stores keep them, and read back once, however many shards hold a share.

Shards run in separate processes, each with its own spend guard, so each shard's store enforces
its share of every budget: N shards of a 10 USD run hold 10/N USD each and never more than 10
together (``budget_settings``). Beside the share, each store records the whole run's budgets, so
the report, the dashboard and the Prefect summary show the run's budget once (``run_budgets``),
never the sum of the shares, and each job's budget beside that job's spend (``budget_uses``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.cost_model import Budgets, whole_of_share
from relaybatch.cost_model.periods import PeriodBudgets
from relaybatch.costs.ledger import budget_amount, read_ledger
from relaybatch.costs.report import opens_stores, store_folders
from relaybatch.folder_progress import read_progress
from relaybatch.run_folder import (
    CHECKPOINT_NAME,
    LEDGER_NAME,
    RunPaths,
    shard_of_folder,
)

RUN_BUDGETS = "run_budgets"  # the stored settings' key of the whole run's budgets
PERIOD_BUDGETS = "period_budgets"  # the key of each execution's and calendar period's budgets


def budget_settings(budgets: Budgets, shards: int = 1) -> dict[str, Any]:
    """The budget part of a store's stored settings (JSON, money as strings): the share this store
    enforces (``budget_usd``, ``job_budgets``) and the run's whole budgets (``run_budgets``)."""
    share = Decimal(shards)
    jobs = dict(budgets.job_usd or {})
    periods = budgets.periods
    whole: dict[str, Any] = {
        "budget_usd": None if budgets.run_usd is None else str(budgets.run_usd),
        "job_budgets": {job: str(usd) for job, usd in jobs.items()},
    }
    settings: dict[str, Any] = {
        "budget_usd": None if budgets.run_usd is None else str(budgets.run_usd / share),
        "job_budgets": {job: str(usd / share) for job, usd in jobs.items()},
        RUN_BUDGETS: whole,
    }
    if periods:  # each execution's and calendar period's budgets, a shard's share of them too
        settings[PERIOD_BUDGETS] = periods.to_json(share)
        whole[PERIOD_BUDGETS] = periods.to_json()
    return settings


def enforced_budgets(saved: Mapping[str, Any]) -> Budgets:
    """What a store's spend guard enforces: the whole run's budgets, or a shard's share of them."""
    run_usd = saved.get("budget_usd")
    jobs = {job: Decimal(usd) for job, usd in (saved.get("job_budgets") or {}).items()}
    periods = PeriodBudgets.from_json(saved.get(PERIOD_BUDGETS))
    return Budgets(
        run_usd=None if run_usd is None else Decimal(run_usd), job_usd=jobs or None, periods=periods
    )


def whole_budgets(saved: Mapping[str, Any], shards: int) -> Budgets:
    """The run's budgets as a store recorded them; a store from before they were recorded gives
    its share times the split it was made for."""
    recorded = saved.get(RUN_BUDGETS)
    if recorded is not None:
        return enforced_budgets(recorded)
    share = enforced_budgets(saved)
    return Budgets(
        run_usd=None if share.run_usd is None else whole_of_share(share.run_usd, shards),
        job_usd={job: whole_of_share(usd, shards) for job, usd in (share.job_usd or {}).items()} or None,
        periods=share.periods.scaled(Decimal(shards)) if share.periods else None,
    )


def run_budgets(run_dir: Path) -> Budgets:
    """The run's budgets, once: from the store of the run (its own or a shard's) whose execution
    started last, so a budget raised for the latest execution is the one shown. Stores never
    executed count as the oldest; on a tie the run's own store comes before its shards."""
    newest: tuple[str, int] | None = None
    found = Budgets()
    for position, folder in enumerate(store_folders(run_dir)):
        read = _read(folder / CHECKPOINT_NAME) if opens_stores(folder) else _read_progress(folder)
        if read is None:
            continue
        started, saved = read
        rank = (started, -position)
        if newest is None or rank > newest:
            newest, found = rank, whole_budgets(saved, _split(folder, run_dir))
    return found


Spend = tuple[Decimal, dict[str, Decimal]]  # (run, per job), as CostStore.spent gives it


def spent_beside(store_dir: Path, limits: Budgets) -> Spend:
    """What the budget of the store at ``store_dir`` (enforcing ``limits``) must count as spent by
    the run's other stores, run and per job, beside its own ledger's spend.

    The run's own store enforces the whole budget: every shard's spend counts, whatever the split.
    A shard of a split into N enforces a share, budget / N. What the stores outside its split spent
    (the run's own store, other splits) takes 1/N of each share: the split may spend what is left,
    (budget - outside) / N per shard. A shard of its split that spent more than that (it spent
    before the outside did) leaves that much less to the others. So the run's stores together
    never pass the budget, in any order of executions, and shards run one after the other still
    get a full share each. Each other store's spend is read from the files its owner writes
    beside it (``folder_spent``), never its SQLite, which may be another host's (docs/prefect.md,
    the storage contract); a partition's likewise.
    """
    if limits.run_usd is None and not limits.job_usd:
        # No budget counts the other stores (none, or the run's held by the Prefect server).
        return Decimal(0), {}
    run_dir = RunPaths(store_dir).run_root
    split = _split(store_dir, run_dir) if store_dir != run_dir else 0
    outside: list[Spend] = []
    siblings: list[Spend] = []
    for folder in store_folders(run_dir):
        if folder == store_dir:
            continue
        spent = folder_spent(folder)
        same_split = split and folder != run_dir and _split(folder, run_dir) == split
        (siblings if same_split else outside).append(spent)
    jobs = {job for _, by_job in outside + siblings for job in by_job}
    total = counted_beside(split, limits.run_usd, [run for run, _ in outside], [run for run, _ in siblings])
    per_job = {
        job: counted_beside(
            split,
            (limits.job_usd or {}).get(job),
            [by_job.get(job, Decimal(0)) for _, by_job in outside],
            [by_job.get(job, Decimal(0)) for _, by_job in siblings],
        )
        for job in jobs
    }
    return total, per_job


def folder_spent(folder: Path) -> Spend:
    """What the store at ``folder`` counts against the run's budgets, run and per job, from the
    files its owner writes beside it: never less than it can come to while its owner may still
    be spending.

    ``ledger.parquet`` (``ledger_spent``) is exact, per job, as of the end of its last execution;
    ``progress.json`` (folder_progress.py) gives the whole of it, exactly when its owner let go,
    and while an execution goes on every few seconds (``live``), with the most that execution can
    bring the store to under the budgets it enforces (its share less what it counted of the
    others, the run's and each job's: ``ceiling_usd``). The larger counts: for a store executing
    now, or whose execution was killed before it let go, that ceiling (its figures may be seconds
    old, and a killed one's leave out its last seconds; the run layer writes a killed one's files
    again exactly before an execution counts it: run/handoff.py ``fresh_spend_files``), so a
    sibling's spend is never counted below what it can reach before it lets go. A shard of the
    same split as the reader has a ceiling within the reader's allowance when nothing outside
    their split spent since it started, and then costs the reader nothing (``counted_beside``).
    A store without a budget of its own has no ceiling: its figures count as they stand."""
    total, by_job = ledger_spent(folder / LEDGER_NAME)
    progress = read_progress(RunPaths(folder))
    if progress is None:
        return total, by_job
    total = max(total, progress.spent_usd)
    if progress.live:  # written by an execution that has not let go yet (going on, or killed)
        if progress.ceiling_usd is not None:
            total = max(total, progress.ceiling_usd)
        for job, ceiling in progress.job_ceilings_usd.items():
            by_job[job] = max(by_job.get(job, Decimal(0)), ceiling)
    return total, by_job


def ledger_spent(ledger: Path) -> Spend:
    """What a ledger Parquet file counts against the budgets, run and per job (``CostStore.spent``
    of the store it was exported from, when it was): charges, and unknown outcomes and open
    reservations at their worst case. No file: nothing."""
    total, by_job = Decimal(0), dict[str, Decimal]()
    for record in read_ledger(ledger, ("job", "usd", "known_usd", "reserved_usd")):
        counted = budget_amount(record)
        total += counted
        by_job[record["job"]] = by_job.get(record["job"], Decimal(0)) + counted
    return total, by_job


def counted_beside(
    split: int, share: Decimal | None, outside: list[Decimal], siblings: list[Decimal]
) -> Decimal:
    """One budget's count of other stores' spend (see ``spent_beside``); ``split`` 0 = the run's store."""
    if not split:
        return sum(outside, Decimal(0)) + sum(siblings, Decimal(0))
    taken = sum(outside, Decimal(0)) / split
    if share is None:
        return taken  # no limit to hold
    allowance = share - taken
    return taken + sum((max(Decimal(0), spent - allowance) for spent in siblings), Decimal(0))


@dataclass(frozen=True)
class BudgetUse:
    """One budget beside what it counts as spent (known + unknown at its worst case)."""

    run: str
    job: str | None  # None: the run's own budget
    spent_usd: Decimal
    budget_usd: Decimal

    @property
    def scope(self) -> str:
        return "run" if self.job is None else f"job {self.job}"

    @property
    def left_usd(self) -> Decimal:
        return max(Decimal(0), self.budget_usd - self.spent_usd)

    @property
    def percent_used(self) -> Decimal:
        return 100 * self.spent_usd / self.budget_usd if self.budget_usd else Decimal(100)


def budget_uses(
    spent_by_run_and_job: Mapping[tuple[str, str], Decimal], budgets: Mapping[str, Budgets]
) -> list[BudgetUse]:
    """Every budget of every run, the run's first then its jobs', each beside its spend."""
    uses = []
    for run, run_budget in sorted(budgets.items()):
        spent = {job: usd for (owner, job), usd in spent_by_run_and_job.items() if owner == run}
        if run_budget.run_usd is not None:
            uses.append(BudgetUse(run, None, sum(spent.values(), Decimal(0)), run_budget.run_usd))
        for job, usd in sorted((run_budget.job_usd or {}).items()):
            uses.append(BudgetUse(run, job, spent.get(job, Decimal(0)), usd))
    return uses


def shard_split(store_dir: Path) -> int:
    """N for a shard's folder (``<run>/shards/<i>-of-<N>``), 1 for the run's own folder."""
    return RunPaths(store_dir).shard_count or 1


def _split(folder: Path, run_dir: Path) -> int:
    split = shard_of_folder(folder.name) if folder != run_dir else None
    return split[1] if split else 1


def _read_progress(folder: Path) -> tuple[str, dict[str, Any]] | None:
    """``_read`` of a shard's or partition's folder, from the progress file its owner writes
    (relaybatch/folder_progress.py), never its store; None when it has none with settings."""
    progress = read_progress(RunPaths(folder))
    if progress is None or not progress.settings:
        return None
    return str(progress.execution.get("started_at") or ""), progress.settings


def _read(checkpoint: Path) -> tuple[str, dict[str, Any]] | None:
    """(when its last execution started, or "" if never; its stored settings), read-only."""
    if not checkpoint.exists():
        return None
    from relaybatch.engine.store import CheckpointStore

    store = CheckpointStore.open_read_only(checkpoint)
    try:
        settings = store.run_settings()
    except sqlite3.Error:
        store.close()
        return None  # an older or newer layout: no budget from it
    try:
        return store.last_execution()["started_at"] or "", settings
    except sqlite3.Error:
        return "", settings  # a store from before executions were recorded: the oldest
    finally:
        store.close()
