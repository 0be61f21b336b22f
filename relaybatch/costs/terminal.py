"""`relaybatch report`: spend tables in the terminal, and the dashboards written to disk."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from relaybatch.console import table
from relaybatch.costs.dashboard import write_dashboard
from relaybatch.costs.dashboard_data import load_dashboard
from relaybatch.costs.report import (
    LedgerGuard,
    RunSpend,
    display_usd,
    load_spend,
    opens_stores,
    run_folders,
    store_folders,
)
from relaybatch.costs.run_budgets import BudgetUse, budget_uses, run_budgets
from relaybatch.costs.unsuccessful import UnsuccessfulSpend, unsuccessful_spend
from relaybatch.errors import UserError
from relaybatch.run_folder import (
    CHECKPOINT_NAME,
    COST_STORE_NAME,
    DASHBOARD_NAME,
    LEDGER_NAME,
    RunPaths,
    shard_of_folder,
)

COMBINED_DASHBOARD_NAME = "relaybatch-report.html"
TABLES = (("job", ("run", "job")), ("model", ("model", "provider")), ("kind", ("kind",)), ("day", ("day",)))


def parse_since(value: str | None, option: str = "--since") -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UserError(f"{option} {value!r}: expected a UTC day such as 2026-11-22") from None


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
    """Known spend, unknown outcomes at their worst case, and the total, as one line; with the
    part of known spend wasted on structured answers that did not fit, when there is any."""
    wasted = spend.wasted_usd
    split = (
        f" (useful {display_usd(spend.known_usd - wasted)}, wasted {display_usd(wasted)} on answers "
        "that did not fit their schema)"
        if wasted
        else ""
    )
    return (
        f"known {display_usd(spend.known_usd)}{split}; unknown (worst case) {display_usd(spend.unknown_usd)} "
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


def unsuccessful_table(lines: Sequence[UnsuccessfulSpend], spend: RunSpend) -> Table:
    """What went to items that did not succeed, per run, state and reason; the total's share of all
    spend (known + unknown) in the caption."""
    numbers = ("items", "calls", "USD (worst case where unknown)")
    shown = table(
        "run", "state", "reason", *numbers, title="Spend on items that did not succeed", whole=numbers
    )
    for line in lines:
        shown.add_row(
            line.run, line.state, line.reason, str(line.items), str(line.calls), display_usd(line.usd)
        )
    total = sum((line.usd for line in lines), Decimal(0))
    share = f"{100 * total / spend.total_usd:.1f}%" if spend.total_usd else "-"
    shown.caption = f"{display_usd(total)} of {display_usd(spend.total_usd)} spent ({share}) bought nothing"
    return shown


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
    by: Sequence[str] = (),
    output: Path | None = None,
    until: str | None = None,
) -> list[Path]:
    """Print the spend tables and write the dashboards; returns the dashboard paths. Each store's
    ledger is refreshed as ``guard`` lets it (not beside its execution: ``add_ledger``). ``by``:
    one more table grouped by those columns; ``output``: that table (every grouping column when
    ``by`` is empty) as CSV or Parquet."""
    day = parse_since(since)
    last = parse_since(until, "--until")
    if day is not None and last is not None and last < day:
        raise UserError(f"--until {until}: before --since {since}; give a day on or after it")
    spend = load_spend(runs_dir, names, day, guard, last)
    for title, columns in TABLES:
        console.print(spend_table(spend, title, columns))
    _grouped(console, spend, by, output)
    filtered = day is not None or last is not None
    uses = [] if filtered else run_budget_uses(spend, run_folders(runs_dir, names))
    if uses:
        console.print(budget_table(uses))
    unsuccessful = [] if filtered else unsuccessful_spend(runs_dir, names)
    if unsuccessful:
        console.print(unsuccessful_table(unsuccessful, spend))
    console.print(spend_summary(spend))
    for folder, writer in spend.busy:
        console.print(f"{folder}: {writer}; its spend is shown as it stands")
    if filtered:
        console.print("budgets count the whole run: run the report without --since/--until to see their use")
    if spend.unknown_calls:
        console.print(
            f"{spend.unknown_calls} call(s) have an unknown cost (a missing price or an unknown outcome): "
            "known USD counts only their priced part, unknown USD their worst case "
            "(see outcome and unknown_prices in ledger.parquet)"
        )
    written = _write_dashboards(runs_dir, names, day, last, spend.runs, dashboards_dir)
    for path in written:
        console.print(f"dashboard: {path}")
    return written


def _grouped(console: Console, spend: RunSpend, by: Sequence[str], output: Path | None) -> None:
    """``--by``: one more table grouped by those columns; ``--output``: that table (every grouping
    column without ``--by``) written as CSV or Parquet."""
    from relaybatch.costs.grouping import ALL, grouped_rows, write_grouped

    if by:
        console.print(spend_table(spend, ", ".join(by), by))
    if output is not None:
        grouped: tuple[str, ...] = tuple(by) or ALL
        table_file = write_grouped(grouped_rows(spend, grouped), grouped, output)
        console.print(f"spend by {', '.join(grouped)}: {table_file}")


def _write_dashboards(
    runs_dir: Path,
    names: Sequence[str],
    day: date | None,
    last: date | None,
    runs: Sequence[str],
    dashboards_dir: Path,
) -> list[Path]:
    """Each run's own dashboard (only by an unfiltered report: it shows the whole run), then the
    combined one of the report in ``dashboards_dir``."""
    written = []
    if day is None and last is None:
        # A run's own dashboard shows the whole run: a filtered report never replaces it.
        for folder in run_folders(runs_dir, names):
            own = load_dashboard(runs_dir, [folder.name])
            page = folder / DASHBOARD_NAME
            # One copy of the charting library for the runs folder, not one per run (4.8 MB each).
            written.append(write_dashboard(own, page, f"relaybatch: {folder.name}", library_dir=runs_dir))
    combined = load_dashboard(runs_dir, names, day, last)
    name, title = combined_dashboard(runs, names, day, last)
    written.append(write_dashboard(combined, dashboards_dir / name, title, library_dir=dashboards_dir))
    return written


def combined_dashboard(
    runs: Sequence[str], names: Sequence[str], day: date | None, until: date | None = None
) -> tuple[str, str]:
    """The combined dashboard's file name and title. Every run, unfiltered: the report's own
    ``relaybatch-report.html``. A subset of runs or a day filter: a file of its own whose name and
    title say the filter, so a filtered report never replaces the whole one."""
    shown = ", ".join(runs)
    if not names and day is None and until is None:
        return COMBINED_DASHBOARD_NAME, f"relaybatch: {shown}" if runs else "relaybatch"
    parts = (
        ([f"runs {shown or ', '.join(names)}"] if names else ["every run"])
        + ([f"since {day.isoformat()} (UTC)"] if day else [])
        + ([f"until {until.isoformat()} (UTC)"] if until else [])
    )
    days = [f"since-{day.isoformat()}"] if day else []
    days += [f"until-{until.isoformat()}"] if until else []
    slug = "-".join([*sorted(names), *days])
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", slug)[:120]
    return f"relaybatch-report-{slug}.html", f"relaybatch: {'; '.join(parts)}"


def store_label(run_dir: Path, folder: Path) -> str:
    """How `relaybatch resolve` names a store folder: ``run`` for the run's own, ``I/N`` for shard I
    of N (what ``--store`` takes)."""
    if folder == run_dir:
        return "run"
    split = shard_of_folder(folder.name)
    return folder.name if split is None else f"{split[0]}/{split[1]}"


def cost_folders(run_dir: Path, only: str | None = None) -> list[Path]:
    """The run's store folders that have a cost store (its own, then its shards'), or only the one
    ``only`` names (``run`` or ``I/N``), which must have one."""
    if only is not None:
        text = only.strip()
        match = re.fullmatch(r"(\d+)\s*/\s*(\d+)", text)
        if text != "run" and match is None:
            raise UserError(
                f"--store {only!r}: write `run` (the run's own store) or a shard as I/N, e.g. 1/2"
            )
        folder = run_dir if match is None else RunPaths(run_dir).shard(int(match[1]), int(match[2])).root
        if not (folder / COST_STORE_NAME).exists():
            what = "run" if match is None else f"shard {match[1]}/{match[2]} of run"
            raise UserError(
                f"{what} {run_dir.name} has no cost ledger ({folder / COST_STORE_NAME} is missing); "
                "list the calls of every store: relaybatch resolve RUN"
            )
        return [folder]
    folders = [folder for folder in store_folders(run_dir) if (folder / COST_STORE_NAME).exists()]
    if not folders:
        raise UserError(f"run {run_dir.name} has no cost ledger ({run_dir / COST_STORE_NAME} is missing)")
    return folders


def _unknown_rows(folder: Path) -> list[dict[str, Any]]:
    """A store's unknown outcomes (calls left in flight too). The run's own folder's from its cost
    store, read-only (it takes no write lock and migrates nothing, so it needs no folder lock and
    reads beside an execution: its calls in flight too); a shard's or partition's, and the run's
    while an execution on another host holds it, from the ``ledger.parquet`` its owner wrote when
    it let go (``opens_stores``: never another host's SQLite; the caller has that file written
    again first where an execution was killed before it could, run/handoff.py ``fresh_spend_files``)."""
    from relaybatch.costs.ledger import CostStore, unknown_outcomes_in

    if not opens_stores(folder):
        return unknown_outcomes_in(folder / LEDGER_NAME)
    reader = CostStore.open_read_only(folder / COST_STORE_NAME)
    if reader is None:
        return []
    try:
        return reader.unknown_outcomes()
    finally:
        reader.close()


def list_unknown(console: Console, run_dir: Path, only: str | None = None) -> list[Path]:
    """Print the unknown outcomes of the run and its shards (or of the ``only`` store), each with
    the store it is in; returns the store folders read (`relaybatch resolve RUN`)."""

    folders = cost_folders(run_dir, only)
    lines = table("call", "store", "job", "item", "model", "worst case USD", title="Unknown outcomes")
    count = 0
    for folder in folders:
        # Listing only reads: an open for writing took SQLite's write lock beside the execution's
        # commits (and died with "database is locked" after 10 s of one) and migrated an older
        # layout under the folder lock's holder. A shard's or partition's from its files.
        for row in _unknown_rows(folder):
            worst = display_usd(Decimal(row["reserved_usd"] or 0))
            label = store_label(run_dir, folder)
            lines.add_row(row["id"], label, row["job"], row["item_id"], row["model"], worst)
            count += 1
    console.print(lines)
    console.print(f"{count} call(s) sent with no answer recorded, each counted at its worst case")
    return folders


def settle_unknown(
    console: Console,
    run_dir: Path,
    row_id: str,
    charged_usd: str | None,
    not_charged: bool,
    only: str | None,
    hold: Callable[[Path], AbstractContextManager[object]],
) -> Path:
    """Settle one unknown outcome from the gateway's bill in the store that has it (the run's own
    or a shard's; ``only`` names one), inside ``hold(folder)`` (that folder's lock: no execution
    answers its calls meanwhile), and rewrite that folder's ledger; returns the folder."""
    from relaybatch.costs.ledger import CostStore, write_ledger

    folders = cost_folders(run_dir, only)
    amount = _charged_amount(charged_usd, not_charged)
    missing = UserError(
        f"run {run_dir.name} has no unknown outcome {row_id!r}"
        + (f" in store {only}" if only is not None else "")
        + " (list them: relaybatch resolve RUN)"
    )
    folder = _store_of(run_dir, folders, row_id, missing)
    item_state: str | None = None
    with hold(folder):  # the folder's one host now: its cost store is read and written here
        store = CostStore(folder / COST_STORE_NAME)
        try:
            # Under the folder's lock no execution of this store is alive: a reservation still open
            # is a call a dead one left in flight, an unknown outcome (as its next execution would
            # record it), and it can be settled now.
            converted = store.reservations_to_unknown()
            unknown = store.unknown_outcomes()
            item_key = next((row["item_key"] for row in unknown if row["id"] == row_id), None)
            settled = item_key is not None and store.resolve(row_id, amount)
            if converted or settled:
                write_ledger(store, folder / LEDGER_NAME)
            open_calls = [row for row in store.unknown_outcomes() if row["item_key"] == item_key]
        finally:
            store.close()
        if settled and item_key is not None and not open_calls:
            item_state = _settle_item(folder, item_key, amount)
    if not settled:
        raise missing
    verdict = "not charged" if amount is None else f"charged {display_usd(amount)}"
    where = "" if folder == run_dir else f" (shard {store_label(run_dir, folder)})"
    console.print(f"{row_id}{where}: {verdict}; the budget counts it so from the next execution on")
    if item_state is not None:
        console.print(ITEM_SETTLED[item_state])
    return folder


def _charged_amount(charged_usd: str | None, not_charged: bool) -> Decimal | None:
    """What the bill shows for the call: ``--charged USD`` (a non-negative amount), or None for
    ``--not-charged``; exactly one of them."""
    from decimal import InvalidOperation

    if (charged_usd is None) == (not not_charged):
        raise UserError("resolve: give exactly one of --charged USD or --not-charged with a CALL id")
    amount: Decimal | None = None
    if charged_usd is not None:
        try:
            amount = Decimal(charged_usd)
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0:
            raise UserError(f"--charged {charged_usd!r}: expected a non-negative amount in USD, e.g. 0.40")
    return amount


def _store_of(run_dir: Path, folders: list[Path], row_id: str, missing: UserError) -> Path:
    """The one store folder whose unknown outcomes include ``row_id`` (``missing`` raised when
    none does; a call id in several stores must be named with its store)."""
    found = [folder for folder in folders if any(row["id"] == row_id for row in _unknown_rows(folder))]
    if not found:
        raise missing
    if len(found) > 1:
        where = ", ".join(store_label(run_dir, folder) for folder in found)
        raise UserError(
            f"{row_id!r} is an unknown outcome in {len(found)} stores of run {run_dir.name} ({where}): each "
            "is a call of its own on the bill; settle each with --store naming it (run, or I/N for a shard)"
        )
    return found[0]


# What a settled call does to its item (engine/states.py: uncertain -> pending | failed).
ITEM_SETTLED = {
    "pending": "its item is pending again: never billed, the next execution sends it",
    "failed": "its item is failed (paid, its answer never recorded): not sent again; "
    "`relaybatch run --retry-failed` sends it again if you want its answer (and pays again)",
}


def _settle_item(folder: Path, item_key: str, amount: Decimal | None) -> str | None:
    """The call's item, if it is still uncertain (or sending, as a dead execution left it), moves as
    the bill says: not charged -> pending, charged -> failed with the charge as its reason."""
    from relaybatch.engine.store import CheckpointStore

    path = folder / CHECKPOINT_NAME
    if not path.exists():
        return None
    reason = (
        "not charged (the gateway's bill, relaybatch resolve): sent again"
        if amount is None
        else f"charged {display_usd(amount)} (the gateway's bill, relaybatch resolve); its answer was never "
        "recorded and sending it again would pay again"
    )
    with CheckpointStore(path) as checkpoint:
        return checkpoint.settle_uncertain(item_key, amount is not None, reason)
