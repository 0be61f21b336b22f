"""`relaybatch report`: spend tables in the terminal, and the dashboards written to disk."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.table import Table

from relaybatch.console import table
from relaybatch.costs.dashboard import write_dashboard
from relaybatch.costs.dashboard_data import load_dashboard
from relaybatch.costs.report import (
    DASHBOARD_NAME,
    LEDGER_NAME,
    LedgerGuard,
    RunSpend,
    display_usd,
    load_spend,
    run_folders,
)
from relaybatch.costs.run_budgets import BudgetUse, budget_uses, run_budgets
from relaybatch.errors import UserError

COMBINED_DASHBOARD_NAME = "relaybatch-report.html"
TABLES = (("job", ("run", "job")), ("model", ("model", "provider")), ("kind", ("kind",)), ("day", ("day",)))


def parse_since(value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UserError(f"--since {value!r}: expected a UTC day such as 2026-11-22") from None


def spend_table(spend: RunSpend, title: str, columns: Sequence[str]) -> Table:
    numbers = ("calls", "known USD", "unknown USD (worst case)", "total USD", "unknown cost")
    lines = table(*columns, *numbers, title=f"Spend by {title}", whole=numbers)
    for line in spend.by(*columns):
        lines.add_row(
            *line.key,
            str(line.calls),
            display_usd(line.usd),
            display_usd(line.unknown_usd),
            display_usd(line.total_usd),
            str(line.unknown_calls or ""),
        )
    lines.add_section()
    lines.add_row(
        "total",
        *[""] * (len(columns) - 1),
        str(spend.calls),
        display_usd(spend.known_usd),
        display_usd(spend.unknown_usd),
        display_usd(spend.total_usd),
        str(spend.unknown_calls or ""),
    )
    return lines


def spend_summary(spend: RunSpend) -> str:  # also the Prefect run summary's spend line
    """Known spend, unknown outcomes at their worst case, and the total, as one line."""
    return (
        f"known {display_usd(spend.known_usd)}; unknown (worst case) {display_usd(spend.unknown_usd)} "
        f"for {spend.unknown_outcomes} call(s) sent with no answer recorded; "
        f"total {display_usd(spend.total_usd)}"
    )


def budget_table(uses: Sequence[BudgetUse]) -> Table:
    """Each budget beside what it counts as spent: the run's once, then each job's."""
    numbers = ("spent USD", "budget USD", "left USD", "used")
    lines = table("run", "budget", *numbers, title="Budgets", whole=numbers)
    for use in uses:
        lines.add_row(
            use.run,
            use.scope,
            display_usd(use.spent_usd),
            display_usd(use.budget_usd),
            display_usd(use.left_usd),
            f"{use.percent_used:.1f}%",
        )
    return lines


def budget_summary(uses: Sequence[BudgetUse]) -> str:  # also the Prefect run summary's budget line
    """Each budget's use as one line: spent (known + unknown) of budget, share used, left."""
    return "; ".join(
        f"{use.run} {use.scope} {display_usd(use.spent_usd)} of {display_usd(use.budget_usd)} "
        f"({use.percent_used:.1f}% used, {display_usd(use.left_usd)} left)"
        for use in uses
    )


def run_budget_uses(spend: RunSpend, run_dirs: Sequence[Path]) -> list[BudgetUse]:
    """The budgets of the runs at ``run_dirs`` beside ``spend`` (the whole runs' spend)."""
    return budget_uses(
        spend.spent_by_run_and_job(), {folder.name: run_budgets(folder) for folder in run_dirs}
    )


def run_report(
    console: Console,
    runs_dir: Path,
    names: Sequence[str],
    since: str | None,
    dashboards_dir: Path,
    guard: LedgerGuard,
) -> list[Path]:
    """Print the spend tables and write the dashboards; returns the dashboard paths. Each store's
    ledger is refreshed as ``guard`` lets it (not beside its execution: ``add_ledger``)."""
    day = parse_since(since)
    spend = load_spend(runs_dir, names, day, guard)
    for title, columns in TABLES:
        console.print(spend_table(spend, title, columns))
    uses = [] if day else run_budget_uses(spend, run_folders(runs_dir, names))
    if uses:
        console.print(budget_table(uses))
    console.print(spend_summary(spend))
    for folder, writer in spend.busy:
        console.print(
            f"{folder}: {writer}; its spend is shown as it stands, and its {LEDGER_NAME} is left for "
            "that process to write"
        )
    if day:
        console.print("budgets count the whole run: run the report without --since to see their use")
    if spend.unknown_calls:
        console.print(
            f"{spend.unknown_calls} call(s) have an unknown cost (a missing price or an unknown outcome): "
            "known USD counts only their priced part, unknown USD their worst case "
            "(see outcome and unknown_prices in ledger.parquet)"
        )
    written = []
    for folder in run_folders(runs_dir, names):
        own = load_dashboard(runs_dir, [folder.name], day)
        written.append(write_dashboard(own, folder / DASHBOARD_NAME, f"relaybatch: {folder.name}"))
    title = f"relaybatch: {', '.join(spend.runs)}" if spend.runs else "relaybatch"
    combined = load_dashboard(runs_dir, names, day)
    written.append(write_dashboard(combined, dashboards_dir / COMBINED_DASHBOARD_NAME, title))
    for path in written:
        console.print(f"dashboard: {path}")
    return written


def resolve_unknown(
    console: Console, run_dir: Path, row_id: str | None, charged_usd: str | None, not_charged: bool
) -> None:
    """List a run's unknown outcomes, or settle one from the gateway's bill (`relaybatch resolve`)."""
    from decimal import Decimal, InvalidOperation

    from relaybatch.costs.ledger import CostStore, write_ledger
    from relaybatch.costs.report import COST_STORE_NAME, LEDGER_NAME

    path = run_dir / COST_STORE_NAME
    if not path.exists():
        raise UserError(f"run {run_dir.name} has no cost ledger ({path} is missing)")
    if row_id is not None and (charged_usd is None) == (not not_charged):
        raise UserError("resolve: give exactly one of --charged USD or --not-charged with a CALL id")
    amount: Decimal | None = None
    if charged_usd is not None:
        try:
            amount = Decimal(charged_usd)
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0:
            raise UserError(f"--charged {charged_usd!r}: expected a non-negative amount in USD, e.g. 0.40")
    if row_id is None:
        # Listing only reads: opened read-only, it never takes SQLite's write lock (an open for
        # writing did, beside the execution's commits, and failed with "database is locked" after
        # 10 s of one) and never migrates the store under a process holding the folder's lock. So
        # it needs no lock and lists beside an execution, its calls in flight included.
        reader = CostStore.open_read_only(path)
        try:
            rows = reader.unknown_outcomes() if reader is not None else []
        finally:
            if reader is not None:
                reader.close()
        lines = table("call", "job", "item", "model", "worst case USD", title="Unknown outcomes")
        for row in rows:
            worst = display_usd(Decimal(row["reserved_usd"] or 0))
            lines.add_row(row["id"], row["job"], row["item_id"], row["model"], worst)
        console.print(lines)
        console.print(f"{len(rows)} call(s) sent with no answer recorded, each counted at its worst case")
        return
    store = CostStore(path)
    try:
        if not store.resolve(row_id, amount):
            raise UserError(
                f"run {run_dir.name} has no unknown outcome {row_id!r} (list them: relaybatch resolve RUN)"
            )
        write_ledger(store, run_dir / LEDGER_NAME)
    finally:
        store.close()
    verdict = "not charged" if amount is None else f"charged {display_usd(amount)}"
    console.print(f"{row_id}: {verdict}; the budget counts it so from the next execution on")
