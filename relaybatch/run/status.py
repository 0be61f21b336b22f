"""What `relaybatch status RUN` shows: counts per state and job, how the last execution ended, the
run's money (spent, unknown outcomes, in flight, each budget and what is left of it), every item
that did not end done (with its reason), remote work (videos, V1 tasks) open for longer than a
threshold with its age, last status and last poll (stuck renders say so), done items whose media
files could not be downloaded again, and the command that resumes the run."""

from __future__ import annotations

import shlex
import sqlite3
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from relaybatch.console import table as folding_table
from relaybatch.cost_model import projected_total, projection_warning
from relaybatch.costs.report import display_usd, store_folders
from relaybatch.engine.poller import MEDIA_MISSING_MESSAGE
from relaybatch.engine.states import (
    ALL_STATES,
    CANCELLED,
    FAILED,
    POLLING,
    SUBMITTED,
    SUPERSEDED,
    TERMINAL_STATES,
    UNCERTAIN,
)
from relaybatch.engine.store import CheckpointStore
from relaybatch.errors import UserError
from relaybatch.folder_progress import FolderProgress, read_progress
from relaybatch.run.locking import Holder, holder_of
from relaybatch.run.views import RunMoney, run_money
from relaybatch.run_folder import PROGRESS_NAME, RunPaths, partition_of_folder
from relaybatch.settings import runs_dir_or_default

# Enough to act on without flooding a terminal; `relaybatch status RUN --all` lists every one.
LISTED = 20
# The states a user must look at, in the order they are listed, with what each means.
EXPLAINED = {
    FAILED: "failed items",
    UNCERTAIN: "uncertain items (sent, answer never recorded; not resent)",
    CANCELLED: "cancelled items",
    SUPERSEDED: "superseded items (the manifest no longer produces them; kept, never exported)",
}

_WITHOUT_REASON = {SUPERSEDED: "no longer in the manifest", CANCELLED: "cancelled"}
# Remote work open for longer than this is listed (`relaybatch status --older-than`).
OPEN_AFTER_SECONDS = 300.0


def counts_table(store: CheckpointStore) -> Table:
    per_job = store.count_by_job_and_state()
    states = [state for state in ALL_STATES if any(state in counts for counts in per_job.values())]
    table = folding_table("job", *states, "total", title="items per state")
    totals = dict.fromkeys(states, 0)
    for job, counts in per_job.items():
        table.add_row(job, *(str(counts.get(state, 0)) for state in states), str(sum(counts.values())))
        for state in states:
            totals[state] += counts.get(state, 0)
    if len(per_job) > 1:
        table.add_row(
            "all", *(str(totals[state]) for state in states), str(sum(totals.values())), style="bold"
        )
    return table


def items_table(store: CheckpointStore, state: str, limit: int | None) -> Table | None:
    columns = ["job", "item_id", "last_error"]
    rows = list(store.iter_items(states=[state], columns=columns, limit=limit))
    if not rows:
        return None
    table = folding_table("job", "item", "why", title=EXPLAINED[state])
    edited = _edited(store, rows) if state == SUPERSEDED else set()
    for row in rows:
        if (row["job"], row["item_id"]) in edited:
            why = "request changed (the manifest still has this item, with a new request)"
        else:
            why = row["last_error"] or _WITHOUT_REASON.get(state, "")
        table.add_row(row["job"], row["item_id"], why)
    return table


def _edited(store: CheckpointStore, rows: list[dict[str, str]]) -> set[tuple[str, str]]:
    """(job, item id) of superseded items whose id the manifest still produces: edited rows."""
    by_job: dict[str, set[str]] = {}
    for row in rows:
        by_job.setdefault(row["job"], set()).add(row["item_id"])
    return {(job, item) for job, items in by_job.items() for item in store.current_item_ids(job, items)}


def last_execution_line(store: CheckpointStore) -> str:
    """How the last execution ended: finished, stopped early and why, or died (no end recorded);
    or that one is executing now (it holds the store's lock: relaybatch/run/locking.py)."""
    return execution_line(store.last_execution(), holder_of(store.path.parent))


def execution_line(last: Mapping[str, str | None], holder: Holder | None) -> str:
    """``last_execution_line`` from a store's last execution (started_at, ended_at, stop_reason)
    and who holds its folder's lock now."""
    if last.get("started_at") is None:
        reason = last.get("stop_reason")
        return "no execution recorded yet" if reason is None else f"last execution stopped early: {reason}"
    if holder is not None and holder.merging:  # a merge sends nothing
        return f"in use now: {holder.describe()}"
    if holder is not None and not holder.momentary:  # a report's or a settling's hold is not one
        return f"executing now: {holder.describe()}"
    if last.get("ended_at") is None:
        return (
            f"last execution, started {last['started_at']}, did not finish: its process died or was "
            "killed (items it left in `sending` become uncertain when the run resumes)"
        )
    if last.get("stop_reason"):
        return f"last execution stopped early at {last['ended_at']}: {last['stop_reason']}"
    return f"last execution finished at {last['ended_at']}"


def money_table(money: RunMoney) -> Table:
    """Each job's spend beside its budget, then the run's (its budget shown once)."""
    numbers = ("known USD", "unknown USD (worst case)", "total USD", "budget USD", "left USD")
    title = "money" + (f" (the run's cost store and {money.shards} shard folder(s))" if money.shards else "")
    table = folding_table("job", *numbers, title=title, whole=numbers)
    for line in money.lines():
        budget = "-" if line.budget is None else display_usd(line.budget.budget_usd)
        left = "-" if line.budget is None else display_usd(line.budget.left_usd)
        amounts = (display_usd(line.known_usd), display_usd(line.unknown_usd), display_usd(line.total_usd))
        if line.job is None:
            table.add_section()
            table.add_row("run", *amounts, budget, left, style="bold")
        else:
            table.add_row(line.job, *amounts, budget, left)
    return table


def money_line(money: RunMoney, executing: bool, items: tuple[int, int] | None = None) -> str:
    """Spent (known), unknown outcomes, calls in flight, the total the budgets count, and what is
    left of the run's budget, as one line. With no execution running, calls still reserved were
    left in flight by one that ended without their answer: unknown outcomes once the run resumes."""
    spend = money.spend
    reserved = f"{display_usd(spend.in_flight_usd)} for {spend.in_flight} call(s)"
    parts = [
        f"spent (known) {display_usd(spend.known_usd)}",
        f"unknown outcomes {display_usd(spend.outcome_unknown_usd)} (worst case) for "
        f"{spend.unknown_outcomes - spend.in_flight} call(s) sent with no answer recorded",
        f"reserved (in flight) {reserved}"
        if executing or not spend.in_flight
        else f"reserved by an execution that ended without their answer {reserved} "
        "(unknown outcomes once the run resumes)",
    ]
    unpriced = spend.unknown_usd - spend.in_flight_usd - spend.outcome_unknown_usd
    if spend.unknown_calls > spend.unknown_outcomes:
        parts.append(
            f"unknown prices {display_usd(unpriced)} (worst case) for "
            f"{spend.unknown_calls - spend.unknown_outcomes} call(s) charged at a price not known"
        )
    parts.append(f"total {display_usd(spend.total_usd)}")
    # ``items``: (ended, still open); the projection prices the open ones at the ended ones' mean.
    # ``items``: (ended, still open); the projection prices the open ones (those in flight too) at
    # the ended ones' mean, so the worst case reserved for calls in flight is left out of it.
    ended, still_open = items or (0, 0)
    settled = spend.total_usd - spend.in_flight_usd
    projected = projected_total(settled, ended, still_open) if still_open else None
    run_line = money.lines()[-1]
    budget = None if run_line.budget is None else run_line.budget.budget_usd
    if projected is not None:
        parts.append(
            f"projected {display_usd(projected)} for the {still_open:,} item(s) still open at the mean so far"
        )
        warning = projection_warning(projected, budget)
        if warning:
            parts.append(f"WARNING: {warning}")
    if run_line.budget is None:
        parts.append("no run budget")
    else:
        use = run_line.budget
        parts.append(f"run budget {display_usd(use.budget_usd)}, {display_usd(use.left_usd)} remaining")
    return "; ".join(parts)


def money_parts(run_dir: Path, items: tuple[int, int] | None = None) -> list[Table | Text]:
    """The run's money, read-only beside a running execution; a store it cannot read is named, and
    the rest of the status still shows. ``items`` (ended, open) adds the projected total."""
    try:
        money = run_money(run_dir)
    except sqlite3.Error as error:
        return [Text(f"money: cannot read the cost store of {run_dir}: {error}")]
    executing = any(
        holder is not None and not holder.momentary and not holder.merging
        for holder in (holder_of(folder) for folder in store_folders(run_dir))
    )
    if (
        not money.spend.calls
        and money.budgets.run_usd is None
        and not money.budgets.job_usd
        and not money.budgets.periods
    ):
        return [Text("money: nothing spent yet; no budget")]
    parts: list[Table | Text] = [money_table(money)] if money.spend.calls or money.budgets.job_usd else []
    return [*parts, Text(f"money: {money_line(money, executing, items)}"), *period_parts(run_dir, money)]


def period_parts(run_dir: Path, money: RunMoney) -> list[Table | Text]:
    """Each period budget (execution, day, week, month) beside its period's spend and what is left:
    the run's own cost store's calls (a shard's store holds its share and counts its own)."""
    from relaybatch.costs import CostStore
    from relaybatch.costs.periods import period_uses
    from relaybatch.run.executions import execution_figures
    from relaybatch.run_folder import COST_STORE_NAME

    if not money.budgets.periods:
        return []
    last = execution_figures(run_dir)
    costs = CostStore.open_read_only(run_dir / COST_STORE_NAME)
    try:
        spent_since = costs.spent_since if costs is not None else (lambda since: Decimal(0))
        lines = period_uses(money.budgets.periods, spent_since, last.total_usd if last else None)
    finally:
        if costs is not None:
            costs.close()
    return [Text(f"money: {line}") for line in lines]


def _age(seconds: float) -> str:
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}"


def open_remote_parts(
    store: CheckpointStore, run_name: str, older_than: float, limit: int | None
) -> list[Table | Text]:
    """Videos and V1 tasks created longer than ``older_than`` seconds ago and not finished: age
    since the create, the status the last poll saw (verbatim), how long ago that poll was, and the
    reason stuck renders carry (relaybatch/engine/poll_plan.py)."""
    now_ms = time.time() * 1000.0
    columns = ["job", "item_id", "submitted_at", "result", "last_error"]
    rows = [
        row
        for row in store.iter_items(states=[SUBMITTED, POLLING], columns=columns)
        if row["submitted_at"] is not None and now_ms - row["submitted_at"] >= older_than * 1000.0
    ]
    if not rows:
        return []
    rows.sort(key=lambda row: row["submitted_at"])
    title = f"remote work open for more than {_age(older_than)} (oldest first)"
    table = folding_table("job", "item", "age", "last status", "last poll", "note", title=title)
    for row in rows[:limit]:
        result = row["result"] or {}
        remote = result.get("remote")
        remote = remote if isinstance(remote, dict) else {}
        polled = result.get("polled_at")
        table.add_row(
            row["job"],
            row["item_id"],
            _age((now_ms - row["submitted_at"]) / 1000.0),
            str(remote.get("status") or "-"),
            f"{_age((now_ms - polled) / 1000.0)} ago" if isinstance(polled, int | float) else "never",
            row["last_error"] or "",
        )
    parts: list[Table | Text] = [table]
    if limit is not None and len(rows) > limit:
        command = status_command(store.path.parent.parent, run_name, "--all")
        parts.append(Text(f"... and {len(rows) - limit} more open; `{command}` lists them"))
    if any((row["last_error"] or "").startswith("stuck:") for row in rows):
        parts.append(
            Text(
                "Stuck renders passed their render deadline (the job's video.render_deadline_seconds): "
                "a resume polls them again; `relaybatch cancel RUN --all-open` cancels them at the gateway."
            )
        )
    return parts


def media_missing_parts(store: CheckpointStore, run_name: str, limit: int | None) -> list[Table | Text]:
    """Done items whose media files could not be downloaded again (engine/poller.py, "Missing media")."""
    total, rows = store.done_with_note(MEDIA_MISSING_MESSAGE, limit)
    if not rows:
        return []
    title = "done items without their media files (videos and tasks: tried again each run)"
    table = folding_table("job", "item", "why", title=title)
    for row in rows:
        table.add_row(row["job"], row["item_id"], row["last_error"])
    parts: list[Table | Text] = [table]
    if limit is not None and total > limit:
        command = status_command(store.path.parent.parent, run_name, "--all")
        parts.append(Text(f"... and {total - limit} more; `{command}` lists them"))
    return parts


def resume_command(store: CheckpointStore, run_name: str) -> str:
    manifest = store.manifest()
    if manifest is None:
        return "relaybatch run MANIFEST (the manifest this run was made from)"
    command = ["relaybatch", "run", manifest[0]]
    if run_name != store.run_name() or run_name != _manifest_run_name(Path(manifest[0])):
        # Named on the command line (`--run-name`): the manifest alone would run another run.
        command += ["--run-name", run_name]
    # The store sits at RUNS/NAME/checkpoint.sqlite: a run outside the default runs folder
    # resumes only with that folder named, or the command would start a new run elsewhere.
    return shlex.join(command + runs_dir_options(store.path.parent.parent))


def _manifest_run_name(path: Path) -> str | None:
    """The run the manifest alone names (its `run.name`, else its file name); None when it cannot
    be read now (moved, edited into an invalid one)."""
    from relaybatch.manifests import run_name_for  # the manifest's parser, only when asked

    try:
        return run_name_for(path)
    except (UserError, OSError, ValueError):
        return None


def runs_dir_options(runs_dir: Path) -> list[str]:
    """``--runs-dir RUNS`` when a command without it would look in another runs folder."""
    runs_dir = runs_dir.resolve()
    return [] if runs_dir == runs_dir_or_default(None).resolve() else ["--runs-dir", str(runs_dir)]


def status_command(runs_dir: Path, run_name: str, *options: str) -> str:
    """The `relaybatch status` command line that shows this run, as the user can paste it."""
    return shlex.join(["relaybatch", "status", run_name, *options, *runs_dir_options(runs_dir)])


def partitions_table(run_dir: Path, flow_runs: Mapping[str, str] | None = None) -> Table | None:
    """One row per partition store of the run (run/partitions.py): its items done of its total,
    the uncertain ones, what runs it or how its last execution ended, the host that runs it (or
    last wrote its figures), and its spend (known, and unknown at its worst case); None without any.

    Read from each partition's progress file and handoff record and from who holds its lock (files
    its owner writes: run/progress_file.py, run/handoff.py), never from its SQLite, which may be
    another host's (DESIGN.md invariant 11). ``flow_runs``: the state and worker process of each
    partition's last Prefect flow run by its name (a column of its own when given)."""
    folders = RunPaths(run_dir).store_folders()[1:]
    if not folders:
        return None
    columns: tuple[str, ...] = ("partition", "done", "uncertain", "total", "execution", "host")
    columns = (*columns, "spent USD", "unknown USD")
    if flow_runs is not None:
        columns = (*columns, "Prefect flow run")
    table = folding_table(
        *columns, title="partitions" if folders[0].shard_split is None else "shards and partitions"
    )
    for folder in folders:
        name = _store_label(folder)
        progress, holder = read_progress(folder), holder_of(folder.root)
        label = str((progress.execution if progress else {}).get("label") or "")
        prefect = [] if flow_runs is None else [f"{label}: {flow_runs.get(label, '?')}" if label else "-"]
        if not folder.checkpoint.exists():
            table.add_row(name, "0", "0", "0", "not planned yet", "-", "-", "-", *prefect)
            continue
        execution = partition_execution_line(folder, progress, holder)
        host = progress.host if progress is not None else "-"
        if holder is not None and not holder.momentary:
            host = holder.host or host
        if progress is None:
            table.add_row(name, "?", "?", "?", execution, host, "?", "?", *prefect)
            continue
        counts = progress.counts
        row = [name, str(counts.get("done", 0)), str(counts.get(UNCERTAIN, 0)), str(progress.total)]
        spend = [display_usd(progress.known_usd), display_usd(progress.unknown_usd + progress.reserved_usd)]
        table.add_row(*row, execution, host, *spend, *prefect)
    return table


def _store_label(folder: RunPaths) -> str:
    """A shard's or partition's row name: "shard 1/2" (by key hash), "3/12" (by input range)."""
    if (shard := folder.shard_split) is not None:
        return f"shard {shard[0]}/{shard[1]}"
    split = partition_of_folder(folder.root.name)
    return f"{split[0]}/{split[1]}" if split else folder.root.name


def partition_flow_run_names(run_dir: Path) -> list[str]:
    """The Prefect flow run names of each partition's last execution (from its progress file)."""
    names = []
    for folder in RunPaths(run_dir).store_folders()[1:]:
        progress = read_progress(folder)
        entry = (progress.execution if progress else {}).get("entry")
        if (
            progress is not None
            and entry in ("flow", "deployment", "schedule")
            and progress.execution.get("label")
        ):
            names.append(str(progress.execution["label"]))
    return names


def partition_execution_line(folder: RunPaths, progress: FolderProgress | None, holder: Holder | None) -> str:
    """How a partition's last execution ended, from its files: as its owner left it when the store
    is as it left it (the handoff record's stamp), else that an execution did not let go."""
    from relaybatch.run.handoff import current_handoff

    if holder is not None and (holder.merging or not holder.momentary):
        line = execution_line({"started_at": "now"}, holder)
        return f"{line}; figures of {progress.written_at}" if progress is not None and progress.live else line
    if progress is not None and not progress.live and current_handoff(folder) is not None:
        return execution_line(progress.execution, None)
    return (
        "its store changed since its owner last let go of it: an execution did not finish (its "
        "process died or was killed; items it left in `sending` become uncertain when it resumes)"
    )


def executed_elsewhere_parts(
    run_dir: Path, holder: Holder, flow_runs: Mapping[str, str] | None = None
) -> list[Table | Text]:
    """`relaybatch status` of a run whose own store another host executes (or merges) now: what
    its progress file and its partitions' files say, never its SQLite (that host's while it
    runs); the items it lists are shown there, or once it has ended."""
    parts: list[Table | Text] = [Text(f"executing now: {holder.describe()}")]
    progress = read_progress(RunPaths(run_dir))
    if progress is not None:
        counts = ", ".join(f"{state} {count:,}" for state, count in sorted(progress.counts.items()))
        money = progress.known_usd, progress.unknown_usd, progress.reserved_usd
        parts.append(
            Text(
                f"as of {progress.written_at}: {counts}; spent (known) {display_usd(money[0])}, unknown "
                f"outcomes {display_usd(money[1])} (worst case), reserved (in flight) {display_usd(money[2])}"
            )
        )
    partitions = partitions_table(run_dir, flow_runs)
    if partitions is not None:
        parts += [partitions, Text(partitions_money_line(run_dir))]
    parts.append(
        Text(
            "its store is that host's while it runs: run `relaybatch status` there for the items it "
            "lists, or here once it has ended"
        )
    )
    return parts


def partitions_money_line(run_dir: Path) -> str:
    """The shards' and partitions' spend added up, from their progress files."""
    folders = RunPaths(run_dir).store_folders()[1:]
    figures = [progress for folder in folders if (progress := read_progress(folder)) is not None]
    known = sum((progress.known_usd for progress in figures), Decimal(0))
    unknown = sum((progress.unknown_usd for progress in figures), Decimal(0))
    reserved = sum((progress.reserved_usd for progress in figures), Decimal(0))
    return (
        f"money: spent (known) {display_usd(known)}; unknown outcomes {display_usd(unknown)} (worst case); "
        f"reserved (in flight) {display_usd(reserved)}; total {display_usd(known + unknown + reserved)} "
        f"over {len(figures)} of {len(folders)} shard(s) and partition(s), as each last wrote "
        f"its {PROGRESS_NAME}"
    )


def execution_parts(store: CheckpointStore, execution: int | None) -> list[Table | Text]:
    """The last execution's figures (or execution ``execution``'s), beside the run's totals: what
    it added, sent, finished and spent, and how it ended (relaybatch/run/executions.py)."""
    from relaybatch.run.executions import execution_figures

    figures = execution_figures(store.path.parent, execution)
    if figures is None:
        return []
    which = "execution" if execution is not None else "last execution"
    return [Text(f"{which}: {figures.line()}; {figures.ending}")]


def status_view(
    store: CheckpointStore,
    run_name: str,
    show_all: bool = False,
    older_than: float = OPEN_AFTER_SECONDS,
    execution: int | None = None,
    flow_runs: Mapping[str, str] | None = None,
) -> Group:
    from relaybatch.fleet.setup import server_budget_lines, whole_job_budgets

    parts: list[Table | Text] = [counts_table(store), Text(last_execution_line(store))]
    parts.extend(execution_parts(store, execution))
    partitions = partitions_table(store.path.parent, flow_runs)
    if partitions is not None:
        parts.append(partitions)
    counts = store.count_by_state()
    ended = sum(n for state, n in counts.items() if state in TERMINAL_STATES and state != SUPERSEDED)
    still_open = sum(n for state, n in counts.items() if state not in TERMINAL_STATES)
    parts.extend(money_parts(store.path.parent, (ended, still_open)))
    jobs = sorted(whole_job_budgets(store.run_settings()))
    parts.extend(Text(f"money: {line}") for line in server_budget_lines(run_name, jobs))
    limit = None if show_all else LISTED
    for state in EXPLAINED:
        table = items_table(store, state, limit)
        if table is None:
            continue
        parts.append(table)
        total = counts.get(state, 0)
        if limit is not None and total > limit:
            command = status_command(store.path.parent.parent, run_name, "--all")
            parts.append(Text(f"... and {total - limit} more {state}; `{command}` lists them"))
    parts.extend(open_remote_parts(store, run_name, older_than, limit))
    parts.extend(media_missing_parts(store, run_name, limit))
    if counts.get(UNCERTAIN):
        parts.append(
            Text(
                "Check uncertain items in the gateway console before resending; set `uncertain: resend` "
                "in the manifest's run settings to send them again."
            )
        )
    open_items = sum(count for state, count in counts.items() if state not in TERMINAL_STATES)
    retryable = open_items + counts.get(FAILED, 0) + counts.get(UNCERTAIN, 0)
    if retryable or store.last_execution()["stop_reason"]:
        parts.append(Text(f"resume with: {resume_command(store, run_name)}"))
    return Group(*parts)
