"""Spend by job, model, kind and day, and run activity (throughput, latency, errors) for reports.

Everything here reads the run folders as they are on disk: the cost store (``costs.sqlite``)
is the ledger's source of truth, and the checkpoint store's event log gives the activity. Money
is summed as Decimal; it is rounded only where it is shown.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.costs.ledger import CostStore, write_ledger
from relaybatch.errors import UserError

COST_STORE_NAME = "costs.sqlite"
LEDGER_NAME = "ledger.parquet"
DASHBOARD_NAME = "dashboard.html"
CHECKPOINT_NAME = "checkpoint.sqlite"
SHARDS_NAME = "shards"  # a sharded run keeps one set of stores per shard under <run>/shards/
DISPLAY_QUANTUM = Decimal("0.000001")


def display_usd(value: Decimal) -> str:
    """Money for people: six decimals. The ledger itself keeps every digit."""
    return f"${value.quantize(DISPLAY_QUANTUM):,}"


@dataclass(frozen=True)
class SpendLine:
    key: tuple[str, ...]
    calls: int
    usd: Decimal  # known spend; calls with an unknown price add what is known
    unknown_calls: int


@dataclass(frozen=True)
class Activity:
    """What a run did over time, from its checkpoint events."""

    finished_per_minute: list[tuple[str, int]] = field(default_factory=list)
    latencies: list[tuple[str, float]] = field(default_factory=list)  # (kind, seconds)
    errors: list[tuple[str, int]] = field(default_factory=list)  # (error, count)


@dataclass(frozen=True)
class RunSpend:
    runs: list[str]
    records: list[dict[str, Any]]
    activity: Activity

    @property
    def total_usd(self) -> Decimal:
        return sum((record_usd(record) for record in self.records), Decimal(0))

    @property
    def unknown_calls(self) -> int:
        return sum(1 for record in self.records if not record["priced"])

    def by(self, *columns: str) -> list[SpendLine]:
        return spend_by(self.records, columns)

    def over_time(self) -> list[tuple[str, Decimal]]:
        """Cumulative spend after each charge, in time order."""
        total, points = Decimal(0), []
        for record in sorted(self.records, key=lambda record: record["charged_at"]):
            total += record_usd(record)
            points.append((record["charged_at"], total))
        return points


def record_usd(record: Mapping[str, Any]) -> Decimal:
    return Decimal(record["usd"] if record["usd"] is not None else record["known_usd"])


def _with_day(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "day": str(record["charged_at"])[:10]}


def spend_by(records: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> list[SpendLine]:
    usd: dict[tuple[str, ...], Decimal] = defaultdict(Decimal)
    calls: Counter[tuple[str, ...]] = Counter()
    unknown: Counter[tuple[str, ...]] = Counter()
    for record in records:
        key = tuple(str(record.get(column) or "-") for column in columns)
        usd[key] += record_usd(record)
        calls[key] += 1
        unknown[key] += 0 if record["priced"] else 1
    return [SpendLine(key, calls[key], usd[key], unknown[key]) for key in sorted(usd)]


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


def ledger_records(run_dir: Path, since: date | None = None) -> list[dict[str, Any]]:
    """The run's ledger rows (refreshing its Parquet export on the way), from ``since`` on."""
    path = run_dir / COST_STORE_NAME
    if not path.exists():
        return []
    store = CostStore(path)
    try:
        write_ledger(store, run_dir / LEDGER_NAME)
        records = [_with_day(dict(record)) for record in store.records()]
    finally:
        store.close()
    cutoff = since.isoformat() if since else ""
    return [record for record in records if record["day"] >= cutoff]


def _read_events(checkpoint: Path) -> list[dict[str, Any]]:
    if not checkpoint.exists():
        return []
    connection = sqlite3.connect(f"file:{checkpoint}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        sql = (
            "select e.key, e.state, e.detail, e.at, i.kind from events e "
            "left join items i on i.key = e.key order by e.id"
        )
        return [dict(row) for row in connection.execute(sql)]
    except sqlite3.Error:
        return []  # an older or newer checkpoint layout: activity is best effort, spend is not
    finally:
        connection.close()


def activity_from_events(events: Iterable[Mapping[str, Any]], since: date | None = None) -> Activity:
    cutoff = since.isoformat() if since else ""
    per_minute: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    started: dict[str, datetime] = {}
    latencies: list[tuple[str, float]] = []
    for event in events:
        at, state = str(event.get("at") or ""), event.get("state")
        if at[:10] < cutoff:
            continue
        if state == "sending":
            started[event["key"]] = datetime.fromisoformat(at)
            continue
        if state in ("done", "failed", "submitted", "uncertain", "cancelled"):
            per_minute[at[:16]] += 1 if state == "done" else 0
            begun = started.pop(event["key"], None)
            if begun is not None:
                seconds = (datetime.fromisoformat(at) - begun).total_seconds()
                latencies.append((str(event.get("kind") or "-"), seconds))
        if state in ("failed", "uncertain") or (state == "pending" and event.get("detail")):
            errors[_error_label(event.get("detail"), state)] += 1
    return Activity(sorted(per_minute.items()), latencies, errors.most_common())


_STATUS_AND_TYPE = re.compile(r"\b([1-5]\d\d)\s+([a-z_]+)")


def _error_label(detail: Any, state: Any) -> str:
    """A short, stable label for an error message: its status and type, not its free text."""
    text = str(detail or state)
    found = _STATUS_AND_TYPE.search(text)
    if found:
        return f"{found.group(1)} {found.group(2)}"
    return " ".join(text.split(":")[0].split()[:4])[:48]


def store_folders(run_dir: Path) -> list[Path]:
    """The run folder and its shard folders (``shards/<i>-of-<n>/``), each with its own stores."""
    shards = run_dir / SHARDS_NAME
    return [run_dir, *(sorted(path for path in shards.iterdir() if path.is_dir()) if shards.is_dir() else [])]


def load_spend(runs_dir: Path, names: Sequence[str], since: date | None = None) -> RunSpend:
    folders = run_folders(runs_dir, names)
    records: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for folder in folders:
        for stores in store_folders(folder):
            records += ledger_records(stores, since)
            events += _read_events(stores / CHECKPOINT_NAME)
    return RunSpend([folder.name for folder in folders], records, activity_from_events(events, since))
