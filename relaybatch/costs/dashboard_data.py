"""What the dashboard draws, read from run folders with memory flat in the run's size.

Charges come from each cost store (``CostStore.records``), activity from each checkpoint store
(``CheckpointStore.iter_events``, its item counts and its run settings). Everything over time is
summed into time buckets that widen (1 s, 10 s, 1 min, 10 min, 1 h, 1 day) once a run would need
more than ``MAX_BUCKETS``; latency percentiles come from a log-scale histogram per kind (each bin
5% wide, so a percentile is within 5% of the exact one).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.cost_model import Budgets
from relaybatch.costs.ledger import CostStore, known_amount, ledger_schema, read_ledger, unknown_amount
from relaybatch.costs.report import error_label, opens_stores, read_events, run_folders, store_folders
from relaybatch.costs.run_budgets import BudgetUse, budget_uses, run_budgets
from relaybatch.engine.states import LIMITER_EVENT, POLLING, SUBMITTED
from relaybatch.folder_progress import read_progress
from relaybatch.run_folder import (
    CHECKPOINT_NAME,
    COST_STORE_NAME,
    HANDOFF_NAME,
    LEDGER_NAME,
    RESULTS_NAME,
    RunPaths,
)
from relaybatch.structured.summary import AnswerSummary, summarize_results

MAX_BUCKETS = 1000
BUCKET_SECONDS = (1, 10, 60, 600, 3600, 86400)
LATENCY_BIN_GROWTH = 1.05
PERCENTILES = (50, 90, 99)
MAX_ERROR_SERIES = 8

INPUT_TOKENS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "input_image_tokens",
)
OUTPUT_TOKENS = ("output_tokens", "reasoning_tokens", "output_image_tokens")


def _moment(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class TimeBuckets:
    """Values summed (or, with ``last=True``, the last value kept) per time bucket."""

    def __init__(self, last: bool = False) -> None:
        self.last = last
        self.step = 0
        self.buckets: dict[int, dict[str, Any]] = {}

    @property
    def seconds(self) -> int:
        return BUCKET_SECONDS[self.step]

    def add(self, at: datetime, values: Mapping[str, Any]) -> None:
        start = int(at.timestamp()) // self.seconds * self.seconds
        bucket = self.buckets.setdefault(start, {})
        self._merge(bucket, values)
        while len(self.buckets) > MAX_BUCKETS and self.step < len(BUCKET_SECONDS) - 1:
            self._widen()

    def _merge(self, bucket: dict[str, Any], values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            bucket[name] = value if self.last else bucket.get(name, 0) + value

    def _widen(self) -> None:
        self.step += 1
        old, self.buckets = self.buckets, {}
        for start in sorted(old):
            merged = self.buckets.setdefault(start // self.seconds * self.seconds, {})
            self._merge(merged, old[start])

    def series(self) -> list[tuple[str, dict[str, Any]]]:
        """(bucket start as ISO UTC, values) in time order."""
        return [
            (datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds"), values)
            for start, values in sorted(self.buckets.items())
        ]

    def cumulative(self, *names: str) -> list[tuple[str, dict[str, Any]]]:
        totals: dict[str, Any] = dict.fromkeys(names, 0)
        points = []
        for moment, values in self.series():
            for name in names:
                totals[name] += values.get(name, 0)
            points.append((moment, dict(totals)))
        return points


class LatencyHistogram:
    """Counts per log-scale bin: percentiles within 5%, memory a few hundred bins per kind."""

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.count = 0

    def add(self, seconds: float) -> None:
        self.bins[math.floor(math.log(max(seconds, 1e-4), LATENCY_BIN_GROWTH))] += 1
        self.count += 1

    def percentile(self, percent: float) -> float:
        rank, seen = percent / 100 * self.count, 0
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen >= rank:
                return float(LATENCY_BIN_GROWTH ** (index + 0.5))  # the bin's middle (geometric)
        return 0.0


@dataclass(frozen=True)
class StuckRender:
    run: str
    job: str
    item: str
    age_seconds: float
    last_status: str
    reason: str


STUCK_SHOWN = 50


def stuck_renders(store: Any, run: str) -> list[StuckRender]:
    """A store's open remote items whose reason says they are stuck (the poller writes it)."""
    columns = ["job", "item_id", "submitted_at", "result", "last_error"]
    rows = store.iter_items(states=[SUBMITTED, POLLING], columns=columns)
    return [stuck for row in rows if (stuck := _stuck(run, row)) is not None]


def stuck_in_handoff(handoff: Path, run: str) -> list[StuckRender]:
    """``stuck_renders`` of a shard's or partition's store from the handoff file its owner wrote
    (``handoff.parquet``: its open remote items are settled rows), never its SQLite."""
    import pyarrow.parquet as pq

    if not handoff.is_file():
        return []
    columns = ["job", "item_id", "submitted_at", "result", "last_error", "state"]
    found = []
    for batch in pq.ParquetFile(handoff).iter_batches(columns=columns):
        for row in batch.to_pylist():
            if row["state"] in (SUBMITTED, POLLING):
                row["result"] = json.loads(row["result"]) if row["result"] else None
                if (stuck := _stuck(run, row)) is not None:
                    found.append(stuck)
    return found


def _stuck(run: str, row: Mapping[str, Any]) -> StuckRender | None:
    reason = row["last_error"] or ""
    if not reason.startswith("stuck:"):
        return None
    remote = (row["result"] or {}).get("remote")
    status = str(remote.get("status") or "-") if isinstance(remote, dict) else "-"
    now_ms = datetime.now(UTC).timestamp() * 1000.0
    age = (now_ms - row["submitted_at"]) / 1000.0 if row["submitted_at"] else 0.0
    return StuckRender(run, row["job"], row["item_id"], age, status, reason)


@dataclass
class DashboardData:
    """Everything the dashboard shows for one or more runs."""

    runs: list[str]
    spend: TimeBuckets = field(default_factory=TimeBuckets)  # usd, input, output tokens, calls
    by_model: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    by_job: dict[tuple[str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))  # (run, job)
    # Spend per UTC day and model, and per day and "run / job": the finance questions' charts.
    by_day_model: dict[tuple[str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    by_day_job: dict[tuple[str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    latency: dict[str, LatencyHistogram] = field(default_factory=lambda: defaultdict(LatencyHistogram))
    errors: TimeBuckets = field(default_factory=TimeBuckets)
    error_totals: Counter[str] = field(default_factory=Counter)
    limiter: TimeBuckets = field(default_factory=lambda: TimeBuckets(last=True))
    finished: TimeBuckets = field(default_factory=TimeBuckets)
    states: Counter[str] = field(default_factory=Counter)
    known_usd: Decimal = Decimal(0)
    unknown_usd: Decimal = Decimal(0)  # price or outcome unknown: the worst case beyond the known part
    unpriced_calls: int = 0
    calls: int = 0
    # Each run's budgets, once however many shards hold a share (run_budgets); left empty when the
    # page shows only charges since a day, since a budget counts the whole run.
    budgets: dict[str, Budgets] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    last_at: datetime | None = None  # the latest charge or event: where the timelines end
    # The label summary of each run's exported results (relaybatch.structured.summary), per run.
    answers: list[tuple[str, AnswerSummary]] = field(default_factory=list)
    # Renders past their render deadline (engine/poll_plan.py), at most STUCK_SHOWN of them.
    stuck: list[StuckRender] = field(default_factory=list)

    @property
    def total_usd(self) -> Decimal:
        return self.known_usd + self.unknown_usd

    @property
    def budget_usd(self) -> Decimal | None:
        """The runs' budget: a run's own, or the sum when every run shown has one (else None)."""
        limits = [budgets.run_usd for budgets in self.budgets.values()]
        if not limits or any(limit is None for limit in limits):
            return None
        return sum((limit for limit in limits if limit is not None), Decimal(0))

    def budget_uses(self) -> list[BudgetUse]:
        """Each run's budget and each job's, beside what it counts as spent (the report's rule)."""
        return budget_uses(self.by_job, self.budgets)

    def job_spend(self) -> dict[str, Decimal]:
        """Spend per job, labelled "run / job"."""
        return {f"{run} / {job}": usd for (run, job), usd in self.by_job.items()}

    def ranked(self, totals: Mapping[str, Decimal]) -> list[tuple[str, Decimal]]:
        """Largest first; ties by name."""
        return sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))

    def percentiles(self) -> dict[str, dict[int, float]]:
        return {
            kind: {p: histogram.percentile(p) for p in PERCENTILES}
            for kind, histogram in sorted(self.latency.items())
            if histogram.count
        }

    def error_series(self) -> list[str]:
        """The error types drawn one by one; the rest are summed as "other"."""
        return [label for label, _ in self.error_totals.most_common(MAX_ERROR_SERIES)]

    # -- reading ------------------------------------------------------------------------------

    def add_charge(self, record: Mapping[str, Any]) -> None:
        at = _moment(str(record.get("charged_at")))
        if at is None:
            return
        self._seen(at)
        self.calls += 1
        # The report's rule: the known part, and the worst case still held beyond it for a call
        # whose price or outcome is unknown; together what the budget counts.
        known, unknown = known_amount(record), unknown_amount(record)
        self.known_usd += known
        self.unknown_usd += unknown
        usd = known + unknown
        self.unpriced_calls += 0 if record.get("priced") else 1
        tokens_in = sum(int(record.get(name) or 0) for name in INPUT_TOKENS)
        tokens_out = sum(int(record.get(name) or 0) for name in OUTPUT_TOKENS)
        self.spend.add(at, {"usd": usd, "input": tokens_in, "output": tokens_out, "calls": 1})
        self.by_model[str(record.get("model") or "-")] += usd
        self.by_job[(str(record.get("run")), str(record.get("job")))] += usd
        day = at.astimezone(UTC).date().isoformat()
        self.by_day_model[(day, str(record.get("model") or "-"))] += usd
        self.by_day_job[(day, f"{record.get('run')} / {record.get('job')}")] += usd
        if record.get("latency_seconds") is not None:
            self.latency[str(record.get("kind") or "-")].add(float(record["latency_seconds"]))

    def _seen(self, at: datetime) -> None:
        if self.last_at is None or at > self.last_at:
            self.last_at = at

    def limiter_series(self) -> list[tuple[str, dict[str, Any]]]:
        """The limit over time, held to the run's last moment (a limit learned once is one event)."""
        series = self.limiter.series()
        if series and self.last_at is not None:
            end = self.last_at.astimezone(UTC).isoformat(timespec="seconds")
            if end > series[-1][0]:
                series.append((end, dict(series[-1][1])))
        return series

    def add_event(self, event: Mapping[str, Any]) -> None:
        at, state = _moment(str(event.get("at"))), event.get("state")
        if at is None:
            return
        self._seen(at)
        if state == LIMITER_EVENT:
            detail = json.loads(event.get("detail") or "{}")
            self.limiter.add(at, {"rpm": detail.get("rpm"), "rate_limited": detail.get("rate_limited", 0)})
            return
        if state in ("done", "failed", "cancelled", "uncertain"):
            self.finished.add(at, {"items": 1})
        if state in ("failed", "uncertain") or (state == "pending" and event.get("detail")):
            label = error_label(event.get("detail"), state)
            self.error_totals[label] += 1
            self.errors.add(at, {label: 1})


def _in_days(moment: object, since: date | None, until: date | None) -> bool:
    """Whether a time's UTC day is from ``since`` to ``until`` (each included when given)."""
    day = str(moment or "")[:10]
    return day >= (since.isoformat() if since else "") and (until is None or day <= until.isoformat())


def _add_checkpoint(
    data: DashboardData, checkpoint: Path, since: date | None, run: str = "", until: date | None = None
) -> None:
    if not checkpoint.exists():
        return
    from relaybatch.engine.store import CheckpointStore

    store = CheckpointStore.open_read_only(checkpoint)
    try:
        for event in store.iter_events():
            if _in_days(event.get("at"), since, until):
                data.add_event(event)
        data.states.update(store.count_by_state())
        if len(data.stuck) < STUCK_SHOWN:
            data.stuck.extend(stuck_renders(store, run)[: STUCK_SHOWN - len(data.stuck)])
        stopped = store.stop_reason()
        if stopped:
            data.stopped.append(stopped)
    except sqlite3.Error:
        return  # an older or newer checkpoint layout: activity is best effort, spend is not
    finally:
        store.close()


def _add_costs(data: DashboardData, cost_store: Path, since: date | None, until: date | None = None) -> None:
    store = CostStore.open_read_only(cost_store)  # an execution may be writing it
    if store is None:
        return
    try:
        for record in store.records():
            if _in_days(record.get("charged_at"), since, until):
                data.add_charge(record)
    finally:
        store.close()


# The dashboard's answers table counts a confidence below this as unsure (the report's default).
UNSURE_BELOW = 0.5


def load_dashboard(
    runs_dir: Path, names: Sequence[str], since: date | None = None, until: date | None = None
) -> DashboardData:
    """The dashboard's data for the named runs (every run when none is named), of the charges from
    ``since`` to ``until`` (UTC days, each included) when given: a budget counts the whole run, so a
    filtered page shows none."""
    folders = run_folders(runs_dir, names)
    data = DashboardData([folder.name for folder in folders])
    for folder in folders:
        if since is None and until is None:
            data.budgets[folder.name] = run_budgets(folder)
            results = sorted((folder / RESULTS_NAME).glob("*.parquet"))
            data.answers += [(folder.name, summary) for summary in summarize_results(results, UNSURE_BELOW)]
        for stores in store_folders(folder):
            if opens_stores(stores):
                _add_costs(data, stores / COST_STORE_NAME, since, until)
                _add_checkpoint(data, stores / CHECKPOINT_NAME, since, folder.name, until)
            else:
                _add_owner_files(data, stores, since, until)
                if len(data.stuck) < STUCK_SHOWN:
                    found = stuck_in_handoff(stores / HANDOFF_NAME, folder.name)
                    data.stuck.extend(found[: STUCK_SHOWN - len(data.stuck)])
    return data


def _add_owner_files(data: DashboardData, folder: Path, since: date | None, until: date | None) -> None:
    """A shard's or partition's folder from the files its owner writes (never its SQLite, perhaps
    another host's: DESIGN.md invariant 11): its charges from ``ledger.parquet`` (as of its last
    execution's end), its items per state and how its last execution stopped from
    ``progress.json``, its events from ``events.parquet`` (each as of its last execution's end;
    its stuck renders from ``handoff.parquet``: ``stuck_in_handoff``)."""
    for record in read_ledger(folder / LEDGER_NAME, ledger_schema().names):
        if _in_days(record.get("charged_at"), since, until):
            data.add_charge(record)
    for event in read_events(folder / CHECKPOINT_NAME):  # from its events.parquet
        if _in_days(event.get("at"), since, until):
            data.add_event(event)
    progress = read_progress(RunPaths(folder))
    if progress is not None:
        data.states.update(progress.counts)
        if progress.execution.get("stop_reason"):
            data.stopped.append(str(progress.execution["stop_reason"]))
