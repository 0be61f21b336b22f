"""Spend by job, model, kind and day, and run activity (throughput, latency, errors) for reports.

Everything here reads the run folders as they are on disk: the cost store (``costs.sqlite``)
is the ledger's source of truth, and the checkpoint store's event log gives the activity. Money
is summed as Decimal; it is rounded only where it is shown.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from itertools import chain
from pathlib import Path
from typing import Any

from relaybatch.costs.ledger import (
    RESERVED,
    UNKNOWN,
    CostStore,
    known_amount,
    read_ledger,
    unknown_amount,
    write_ledger,
)
from relaybatch.errors import UserError
from relaybatch.folder_lock import executed_elsewhere
from relaybatch.run_folder import (
    CHECKPOINT_NAME,
    COST_STORE_NAME,
    EVENT_COLUMNS,
    LEDGER_NAME,
    SHARDS_NAME,
    RunPaths,
)

DISPLAY_QUANTUM = Decimal("0.000001")

# Whether a report may rewrite a store folder's ledger.parquet: entered around the rewrite, it
# yields None while this process may write the folder (holding the folder's lock meanwhile), or
# who writes the folder now (an execution, a merge) and what becomes of the ledger. The
# run layer's locks decide (run/locking.py ``refreshing_ledger``); this layer imports none of them.
LedgerGuard = Callable[[Path], AbstractContextManager[str | None]]


def unguarded(folder: Path) -> AbstractContextManager[str | None]:
    """For a caller that already holds the folder's lock (a run's own summary, a test)."""
    return nullcontext(None)


def display_usd(value: Decimal) -> str:
    """Money for people: six decimals. The ledger itself keeps every digit."""
    return f"${value.quantize(DISPLAY_QUANTUM):,}"


@dataclass(frozen=True)
class SpendLine:
    key: tuple[str, ...]
    calls: int
    usd: Decimal  # known spend; calls with an unknown price add what is known
    unknown_calls: int
    unknown_usd: Decimal = Decimal(0)  # worst case still held for calls of unknown cost or outcome

    @property
    def total_usd(self) -> Decimal:
        return self.usd + self.unknown_usd


@dataclass(frozen=True)
class Activity:
    """What a run did over time, from its checkpoint events."""

    finished_per_minute: list[tuple[str, int]] = field(default_factory=list)
    latency_histogram: list[tuple[str, int]] = field(default_factory=list)  # (bin label, calls)
    errors: list[tuple[str, int]] = field(default_factory=list)  # (error, count)

    @property
    def latency_count(self) -> int:
        return sum(count for _, count in self.latency_histogram)


# Spend is kept summed per group and per minute, never per call: memory does not grow with the run.
GROUP_COLUMNS = ("run", "job", "model", "provider", "kind", "day")
MAX_TIME_POINTS = 600


@dataclass
class Totals:
    calls: int = 0
    usd: Decimal = Decimal(0)  # known
    unknown_calls: int = 0
    unknown_usd: Decimal = Decimal(0)  # worst case beyond what is known, of calls of unknown cost
    unknown_outcomes: int = 0  # calls sent with no answer recorded (in flight included)
    in_flight: int = 0  # of those, calls an execution is waiting on (reserved, not answered yet)
    in_flight_usd: Decimal = Decimal(0)  # their worst case (part of unknown_usd)
    outcome_unknown_usd: Decimal = Decimal(0)  # the worst case of the others (part of unknown_usd)
    wasted_usd: Decimal = Decimal(0)  # known spend on answers that did not fit their schema (part of usd)

    def add(
        self,
        usd: Decimal,
        priced: bool,
        unknown_usd: Decimal = Decimal(0),
        outcome: str = "",
        wasted: bool = False,
    ) -> None:
        self.calls += 1
        self.usd += usd
        self.wasted_usd += usd if wasted else Decimal(0)
        self.unknown_calls += 0 if priced else 1
        self.unknown_usd += unknown_usd
        self.unknown_outcomes += 1 if outcome in (UNKNOWN, RESERVED) else 0
        if outcome == RESERVED:
            self.in_flight += 1
            self.in_flight_usd += unknown_usd
        elif outcome == UNKNOWN:
            self.outcome_unknown_usd += unknown_usd


@dataclass(frozen=True)
class RunSpend:
    runs: list[str]
    groups: dict[tuple[str, ...], Totals] = field(default_factory=dict)  # keyed by GROUP_COLUMNS
    per_minute: dict[str, Decimal] = field(default_factory=dict)  # spend per UTC minute
    activity: Activity = field(default_factory=Activity)
    # Store folders whose ledger was left to the process writing them now: (folder, who).
    busy: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def known_usd(self) -> Decimal:
        """Spend whose amount is known (a call of unknown price adds its priced part)."""
        return sum((totals.usd for totals in self.groups.values()), Decimal(0))

    @property
    def unknown_usd(self) -> Decimal:
        """The worst case still held for calls whose cost or outcome is unknown, beyond what is known."""
        return sum((totals.unknown_usd for totals in self.groups.values()), Decimal(0))

    @property
    def total_usd(self) -> Decimal:
        """Known + unknown (worst case): what the budget counts as spent."""
        return self.known_usd + self.unknown_usd

    @property
    def unknown_outcomes(self) -> int:
        return sum(totals.unknown_outcomes for totals in self.groups.values())

    @property
    def wasted_usd(self) -> Decimal:
        """Known spend on structured answers that did not fit their schema (re-asked or failed)."""
        return sum((totals.wasted_usd for totals in self.groups.values()), Decimal(0))

    @property
    def in_flight(self) -> int:
        """Calls reserved and in flight: an execution is waiting on their answer."""
        return sum(totals.in_flight for totals in self.groups.values())

    @property
    def in_flight_usd(self) -> Decimal:
        """The worst case the budget holds for calls in flight (part of ``unknown_usd``)."""
        return sum((totals.in_flight_usd for totals in self.groups.values()), Decimal(0))

    @property
    def outcome_unknown_usd(self) -> Decimal:
        """The worst case held for calls sent with no answer recorded and none awaited (part of
        ``unknown_usd``; `relaybatch resolve` settles them)."""
        return sum((totals.outcome_unknown_usd for totals in self.groups.values()), Decimal(0))

    @property
    def calls(self) -> int:
        return sum(totals.calls for totals in self.groups.values())

    @property
    def unknown_calls(self) -> int:
        return sum(totals.unknown_calls for totals in self.groups.values())

    def by(self, *columns: str) -> list[SpendLine]:
        positions = [GROUP_COLUMNS.index(column) for column in columns]
        merged: dict[tuple[str, ...], Totals] = defaultdict(Totals)
        for key, totals in self.groups.items():
            line = merged[tuple(key[position] for position in positions)]
            line.calls += totals.calls
            line.usd += totals.usd
            line.unknown_calls += totals.unknown_calls
            line.unknown_usd += totals.unknown_usd
        return [
            SpendLine(key, t.calls, t.usd, t.unknown_calls, t.unknown_usd)
            for key, t in sorted(merged.items())
        ]

    def spent_by_run_and_job(self) -> dict[tuple[str, str], Decimal]:
        """Known + unknown per (run, job): what each budget counts as spent."""
        return {(line.key[0], line.key[1]): line.total_usd for line in self.by("run", "job")}

    def over_time(self) -> list[tuple[str, Decimal]]:
        """Cumulative spend at the end of each minute with a charge (at most MAX_TIME_POINTS points)."""
        total, points = Decimal(0), []
        for minute, usd in sorted(self.per_minute.items()):
            total += usd
            points.append((minute, total))
        step = -(-len(points) // MAX_TIME_POINTS)  # ceiling division
        if step <= 1:
            return points
        kept = points[step - 1 :: step]
        return kept if kept[-1] == points[-1] else [*kept, points[-1]]

    def add(self, record: Mapping[str, Any]) -> None:
        usd, unknown = known_amount(record), unknown_amount(record)
        key = tuple(str(record.get(column) or "-") for column in GROUP_COLUMNS)
        totals = self.groups.setdefault(key, Totals())
        totals.add(usd, bool(record["priced"]), unknown, record["outcome"], bool(record.get("wasted")))
        if "charged_at" in record:  # read without it (JOB_COLUMNS): no spend over time
            minute = str(record["charged_at"])[:16]
            self.per_minute[minute] = self.per_minute.get(minute, Decimal(0)) + usd + unknown


def run_folders(runs_dir: Path, names: Sequence[str]) -> list[Path]:
    """The named runs, or every run under ``runs_dir`` that has a cost store or a checkpoint."""
    if names:
        folders = [runs_dir / name for name in names]
        missing = [folder.name for folder in folders if not folder.is_dir()]
        if missing:
            raise UserError(f"no run named {', '.join(missing)} under {runs_dir}")
        return folders
    if not runs_dir.is_dir():
        raise UserError(f"no runs folder at {runs_dir}: run a manifest first (relaybatch run FILE)")
    stores = (COST_STORE_NAME, CHECKPOINT_NAME, SHARDS_NAME)
    return sorted(folder for folder in runs_dir.iterdir() if any((folder / name).exists() for name in stores))


REPORT_COLUMNS = (
    "run",
    "job",
    "model",
    "provider",
    "kind",
    "charged_at",
    "usd",
    "known_usd",
    "reserved_usd",
    "priced",
    "outcome",
    "wasted",
)

# Enough for spend per job, unknown outcomes and calls in flight (`relaybatch status`): reading
# the run, model and time of every row through the ``charges`` view costs about a third more.
JOB_COLUMNS = ("job", "usd", "known_usd", "reserved_usd", "priced", "outcome")


def opens_stores(folder: Path) -> bool:
    """Whether a report, status or dashboard may open the SQLite stores of ``folder``: the run's own
    folder unless an execution (or a merge) on another host holds it; never a shard's or a
    partition's (``<run>/shards/*``), which may be another host's. Those are read from the files
    their owner writes beside them (``ledger.parquet``, ``progress.json``, ``handoff.parquet``:
    DESIGN.md invariant 11, docs/prefect.md "The storage contract")."""
    if RunPaths(folder).run_root != folder:
        return False
    return executed_elsewhere(folder) is None


def add_ledger(
    spend: RunSpend,
    run_dir: Path,
    since: date | None = None,
    export: bool = True,
    columns: Sequence[str] = REPORT_COLUMNS,
    guard: LedgerGuard = unguarded,
    until: date | None = None,
) -> None:
    """Add a store's charges from ``since`` on (to ``until``, that UTC day included) to ``spend``,
    grouped by those of ``columns`` that are ``GROUP_COLUMNS``. With ``export``, its Parquet export
    is refreshed first when ``guard`` lets this process write the folder; when another writes it
    (an execution), the ledger is left to that one and noted in ``spend.busy``. The charges are
    read from the store opened read-only, as they stand; a shard's or partition's folder's from
    the ``ledger.parquet`` its owner wrote when its last execution ended (``opens_stores``). No
    store yet: nothing spent yet."""
    if not opens_stores(run_dir):
        _add_records(spend, read_ledger(run_dir / LEDGER_NAME, columns, _iso(since)), until)
        return
    path = run_dir / COST_STORE_NAME
    if export and path.exists():
        with guard(run_dir) as writer:
            if writer is None:
                _refresh_ledger(path, run_dir / LEDGER_NAME)
            else:
                spend.busy.append((run_dir, writer))
    store = CostStore.open_read_only(path)
    if store is None:
        return
    try:
        if until is not None and "charged_at" not in columns:
            columns = (*columns, "charged_at")
        _add_records(spend, store.charges_since(columns, _iso(since)), until)
    finally:
        store.close()


def _iso(day: date | None) -> str:
    return day.isoformat() if day else ""


def _add_records(spend: RunSpend, records: Iterable[dict[str, Any]], until: date | None) -> None:
    last = until.isoformat() if until else None
    for record in records:
        if "charged_at" in record:
            record["day"] = str(record["charged_at"])[:10]
            if last is not None and record["day"] > last:
                continue
        spend.add(record)


def _refresh_ledger(cost_store: Path, ledger: Path) -> None:
    store = CostStore(cost_store)  # opened for writing: an older layout is migrated first
    try:
        write_ledger(store, ledger)
    finally:
        store.close()


def read_events(checkpoint: Path) -> Iterator[dict[str, Any]]:
    """A checkpoint's events in order, streamed (with the item's kind), read-only beside the engine;
    a shard's or partition's from the ``events.parquet`` its owner wrote beside it (``opens_stores``)."""
    if not opens_stores(checkpoint.parent):
        yield from _events_file(RunPaths(checkpoint.parent).events)
        return
    if not checkpoint.exists():
        return
    from relaybatch.engine.store import CheckpointStore

    store = CheckpointStore.open_read_only(checkpoint)
    try:
        yield from store.iter_events()
    except sqlite3.Error:
        return  # an older or newer checkpoint layout: activity is best effort, spend is not
    finally:
        store.close()


def _events_file(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    if not path.is_file():
        return
    for batch in pq.ParquetFile(path).iter_batches(columns=list(EVENT_COLUMNS)):
        yield from batch.to_pylist()


LATENCY_BINS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
LATENCY_LABELS = (*(f"<={edge:g}s" for edge in LATENCY_BINS), f">{LATENCY_BINS[-1]:g}s")


def _latency_bin(seconds: float) -> int:
    return next((index for index, edge in enumerate(LATENCY_BINS) if seconds <= edge), len(LATENCY_BINS))


def activity_from_events(
    events: Iterable[Mapping[str, Any]], since: date | None = None, until: date | None = None
) -> Activity:
    """Counts only (per minute, per latency bin, per error): memory does not grow with the run."""
    cutoff = since.isoformat() if since else ""
    last = until.isoformat() if until else "9999"
    per_minute: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    started: dict[str, datetime] = {}  # calls in flight only: removed when they answer
    latency = [0] * len(LATENCY_LABELS)
    for event in events:
        at, state = str(event.get("at") or ""), event.get("state")
        if at[:10] < cutoff or at[:10] > last:
            continue
        if state == "sending":
            started[event["key"]] = datetime.fromisoformat(at)
            continue
        if state in ("done", "failed", "submitted", "uncertain", "cancelled"):
            per_minute[at[:16]] += 1 if state == "done" else 0
            begun = started.pop(event["key"], None)
            if begun is not None:
                latency[_latency_bin((datetime.fromisoformat(at) - begun).total_seconds())] += 1
        if state in ("failed", "uncertain") or (state == "pending" and event.get("detail")):
            errors[error_label(event.get("detail"), state)] += 1
    histogram = list(zip(LATENCY_LABELS, latency, strict=True)) if any(latency) else []
    return Activity(sorted(per_minute.items()), histogram, errors.most_common())


_STATUS_AND_TYPE = re.compile(r"\b([1-5]\d\d)\s+([a-z_]+)")


def error_label(detail: Any, state: Any) -> str:
    """A short, stable label for an error message: its status and type, not its free text."""
    text = str(detail or state)
    found = _STATUS_AND_TYPE.search(text)
    if found:
        return f"{found.group(1)} {found.group(2)}"
    return " ".join(text.split(":")[0].split())  # whole: a legend or a table never cuts a reason


def store_folders(run_dir: Path) -> list[Path]:
    """The run folder and its shard folders (``shards/<i>-of-<n>/``), each with its own stores."""
    return [folder.root for folder in RunPaths(run_dir).store_folders()]


def load_spend(
    runs_dir: Path,
    names: Sequence[str],
    since: date | None = None,
    guard: LedgerGuard = unguarded,
    until: date | None = None,
) -> RunSpend:
    """The named runs' spend and activity (every run's when none is named), refreshing each store's
    ledger as ``guard`` lets it (``add_ledger``)."""
    folders = run_folders(runs_dir, names)
    spend = RunSpend([folder.name for folder in folders])
    stores = [stores for folder in folders for stores in store_folders(folder)]
    for folder in stores:
        add_ledger(spend, folder, since, guard=guard, until=until)
    # A partition's events from the events.parquet its owner wrote (read_events).
    events = chain.from_iterable(read_events(folder / CHECKPOINT_NAME) for folder in stores)
    activity = activity_from_events(events, since, until)
    return RunSpend(spend.runs, spend.groups, spend.per_minute, activity, spend.busy)


def run_spend_figures(
    run_dir: Path,
    export: bool = True,
    columns: Sequence[str] = REPORT_COLUMNS,
    guard: LedgerGuard = unguarded,
) -> RunSpend:
    """A run's spend from its cost stores alone (shards included): known, unknown, total."""
    spend = RunSpend([run_dir.name])
    for folder in store_folders(run_dir):
        add_ledger(spend, folder, export=export, columns=columns, guard=guard)
    return spend
