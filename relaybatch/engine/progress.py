"""How far, how fast, why, how much: the progress of a running execution, for a person or a log.

The engine hands a ``Snapshot`` to its reporter twice a second. On a terminal ``RichProgress``
draws a live table: a bar per kind with done/total, percent, rate and ETA, then the run's elapsed
time, what is in flight and polling, 429s and retries, the limiter's current limit and where it
came from, and the money spent, unknown and reserved against the budget. Off a terminal (cron,
CI, a log file) ``PlainProgress`` writes the same figures as one line every N seconds
(``RELAYBATCH_PROGRESS_EVERY_SECONDS``, default 10) and a summary line at the end.

Rates are measured per kind over the last minute, and the ETA is the slowest kind's: a run whose
chats are done but whose videos still render shows the videos' time, not the chats'.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import IO, Any, Protocol

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from relaybatch.console import output_console
from relaybatch.cost_model import projected_total
from relaybatch.engine.spend import SpendFigures
from relaybatch.engine.states import (
    ALL_STATES,
    CANCELLED,
    DONE,
    FAILED,
    SUPERSEDED,
    TERMINAL_STATES,
    UNCERTAIN,
)
from relaybatch.engine.store import CheckpointStore
from relaybatch.limiting import WatchedLimiter

RATE_WINDOW_SECONDS = 60.0
DEFAULT_EVERY_SECONDS = 10.0


@dataclass(frozen=True)
class KindTotals:
    """A kind's items in the run, and how many were already finished when this execution began."""

    total: int
    finished_before: int = 0
    before: Mapping[str, int] = field(default_factory=dict)  # finished_before per final state


@dataclass(frozen=True)
class Snapshot:
    """What the engine reports. ``finished`` counts "kind:state" reached in this execution."""

    finished: dict[str, int]
    in_flight: int
    polling: int
    elapsed: float
    spent_usd: Decimal | None
    stopped: str | None
    remaining: int | None = None
    kinds: dict[str, KindTotals] = field(default_factory=dict)
    queued: int = 0
    retries: int = 0
    rate_limited: int = 0
    limit_rpm: float | None = None
    limit_source: str | None = None
    money: SpendFigures | None = None
    # Renders past their deadline: "item (job) age, last status" (poll_plan.py).
    stuck: tuple[str, ...] = ()

    def count(self, state: str) -> int:
        return sum(number for name, number in self.finished.items() if name.endswith(f":{state}"))

    def finished_of(self, kind: str, *states: str) -> int:
        return sum(self.finished.get(f"{kind}:{state}", 0) for state in states)

    def kind_names(self) -> list[str]:
        return sorted(set(self.kinds) | {name.split(":", 1)[0] for name in self.finished})

    def ended_of(self, kind: str) -> int:
        """Items of ``kind`` in a terminal state (done or not), this execution and earlier ones."""
        before = self.kinds[kind].finished_before if kind in self.kinds else 0
        return before + self.finished_of(kind, DONE, FAILED, CANCELLED, UNCERTAIN)

    def state_of(self, kind: str, state: str) -> int:
        """Items of ``kind`` that ended in ``state``, this execution and earlier ones."""
        before = self.kinds[kind].before.get(state, 0) if kind in self.kinds else 0
        return before + self.finished_of(kind, state)

    def total_of(self, kind: str) -> int | None:
        return self.kinds[kind].total if kind in self.kinds else None

    @property
    def rate(self) -> float:
        """Items finished per second so far in this execution."""
        return sum(self.finished.values()) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        if self.remaining is None or self.rate <= 0:
            return None
        return self.remaining / self.rate


def kind_totals(store: CheckpointStore) -> dict[str, KindTotals]:
    """Items per kind in the run's store, and those already finished (a resumed run's head start)."""
    totals = {}
    for kind, counts in store.count_by_kind_and_state().items():
        # Superseded items are no longer the manifest's: not part of what this run has to do.
        live = {state: n for state, n in counts.items() if state in ALL_STATES and state != SUPERSEDED}
        finished = sum(count for state, count in live.items() if state in TERMINAL_STATES)
        ended = {state: count for state, count in live.items() if state in TERMINAL_STATES}
        totals[kind] = KindTotals(sum(live.values()), finished, ended)
    return totals


def limiter_figures(limiter: WatchedLimiter | None) -> dict[str, Any]:
    """The limiter's current limit, where it came from and the 429s it saw (none without one)."""
    if limiter is None:
        return {}
    return {
        "limit_rpm": limiter.requests_per_minute,
        "limit_source": limiter.limit_source(),
        "rate_limited": limiter.rate_limited,
    }


class ProgressReporter(Protocol):
    def update(self, snapshot: Snapshot) -> None: ...

    def finish(self, snapshot: Snapshot) -> None: ...


class Rates:
    """Items finished per second for each kind, over the last ``window`` seconds of snapshots."""

    def __init__(self, window: float = RATE_WINDOW_SECONDS) -> None:
        self.window = window
        self.samples: deque[tuple[float, dict[str, int]]] = deque()

    def add(self, snapshot: Snapshot) -> None:
        counts = {kind: snapshot.ended_of(kind) for kind in snapshot.kind_names()}
        self.samples.append((snapshot.elapsed, counts))
        while len(self.samples) > 2 and self.samples[1][0] <= snapshot.elapsed - self.window:
            self.samples.popleft()

    def per_second(self, kind: str, snapshot: Snapshot) -> float:
        if not self.samples:
            return 0.0
        since, counts = self.samples[0]
        if since >= snapshot.elapsed:  # one sample: the execution's own start is the baseline
            since, before = 0.0, snapshot.ended_of(kind) - snapshot.finished_of(kind, *_FINISHED)
        else:
            before = counts.get(kind, 0)
        seconds = snapshot.elapsed - since
        return max(0, snapshot.ended_of(kind) - before) / seconds if seconds > 0 else 0.0


_FINISHED = (DONE, FAILED, CANCELLED, UNCERTAIN)


@dataclass(frozen=True)
class KindLine:
    kind: str
    finished: int  # in a final state: done, failed, uncertain or cancelled
    total: int | None
    done: int
    rate: float
    eta: float | None  # None: unknown (nothing of this kind finished yet); 0: nothing left

    @property
    def percent(self) -> float | None:
        if not self.total:
            return None
        return 100.0 * self.finished / self.total

    @property
    def not_done(self) -> int:
        return self.finished - self.done


@dataclass(frozen=True)
class Figures:
    """Everything shown, computed once for both the live table and the log line."""

    kinds: list[KindLine]
    finished: int
    total: int | None
    rate: float
    eta: float | None
    snapshot: Snapshot

    @property
    def percent(self) -> float | None:
        return 100.0 * self.finished / self.total if self.total else None

    @property
    def done(self) -> int:
        return sum(line.done for line in self.kinds)


def figures(snapshot: Snapshot, rates: Rates) -> Figures:
    lines = []
    for kind in snapshot.kind_names():
        finished, total = snapshot.ended_of(kind), snapshot.total_of(kind)
        rate = rates.per_second(kind, snapshot)
        left = None if total is None else max(0, total - finished)
        eta = 0.0 if left == 0 else (left / rate if left is not None and rate > 0 else None)
        lines.append(KindLine(kind, finished, total, snapshot.state_of(kind, DONE), rate, eta))
    totals = [line.total for line in lines]
    total = sum(t for t in totals if t is not None) if lines and None not in totals else None
    etas = [line.eta for line in lines]
    eta = None if None in etas else max((e for e in etas if e is not None), default=0.0)
    if total is None and snapshot.remaining is not None:
        eta = snapshot.eta_seconds
    return Figures(
        lines, sum(line.finished for line in lines), total, sum(line.rate for line in lines), eta, snapshot
    )


# -- formatting ------------------------------------------------------------------------------


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}"


def _usd(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.0001'))}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _of(done: int, total: int | None) -> str:
    return f"{done}/{'?' if total is None else total}"


def limit_text(snapshot: Snapshot) -> str:
    if snapshot.limit_rpm is None:
        return "limit none known yet" if snapshot.limit_source else "limit -"
    return f"limit {snapshot.limit_rpm:.0f} rpm ({snapshot.limit_source or 'configured'})"


def activity_text(snapshot: Snapshot) -> str:
    return (
        f"in flight {snapshot.in_flight} · queued {snapshot.queued} · polling {snapshot.polling} · "
        f"429s {snapshot.rate_limited} · retries {snapshot.retries} · {limit_text(snapshot)}"
    )


def money_text(snapshot: Snapshot) -> str:
    money = snapshot.money
    if money is None:
        return "spent " + ("-" if snapshot.spent_usd is None else _usd(snapshot.spent_usd))
    parts = [
        f"spent {_usd(money.spent_usd)}",
        f"unknown {_usd(money.unknown_usd)}",
        f"reserved {_usd(money.reserved_usd)}",
    ]
    projected = projection(snapshot)
    if projected is not None:
        parts.append(f"projected {_usd(projected)}")
    if money.budget_usd is None and not money.periods:
        parts.append("no budget")
    if money.budget_usd is not None:
        used = money.spent_usd + money.unknown_usd + money.reserved_usd
        whose = f"this shard's 1/{money.shards} of the run's, " if money.shards > 1 else ""
        parts.append(f"budget {_usd(money.budget_usd)} ({whose}{_share(used, money.budget_usd)} used)")
        if projected is not None and projected > money.budget_usd:
            parts.append("WARNING: the projection exceeds the budget")
    for name, limit, used in money.periods:
        parts.append(f"{name} budget {_usd(limit)} ({_share(used, limit)} used)")
    return " · ".join(parts)


def _share(used: Decimal, limit: Decimal) -> str:
    return f"{100 * used / limit if limit else Decimal(100):.1f}%"


def projection(snapshot: Snapshot) -> Decimal | None:
    """The run's projected total from the answers so far (cost_model.projected_total): what the
    budget counts as spent, plus every item still open at the mean cost of the items that ended."""
    money = snapshot.money
    if money is None or snapshot.remaining is None:
        return None
    ended = sum(snapshot.ended_of(kind) for kind in snapshot.kind_names())
    return projected_total(money.spent_usd + money.unknown_usd, ended, snapshot.remaining)


def eta_text(shown: Figures) -> str:
    if shown.eta is not None:
        return f"ETA {clock(shown.eta)}"
    waiting = [line.kind for line in shown.kinds if line.eta is None and line.rate == 0]
    return f"ETA ? (no {', '.join(waiting)} finished yet)" if waiting else "ETA ?"


def outcome_text(shown: Figures) -> str:
    """Finished is not done: when some finished items are not done, what they are."""
    if shown.finished == shown.done:
        return ""
    parts = [f"{shown.done} done"]
    for state in (FAILED, UNCERTAIN, CANCELLED):
        count = sum(shown.snapshot.state_of(line.kind, state) for line in shown.kinds)
        if count:
            parts.append(f"{count} {state}")
    return ": " + ", ".join(parts)


def headline(shown: Figures) -> str:
    return (
        f"finished {_of(shown.finished, shown.total)} ({_percent(shown.percent)}){outcome_text(shown)} · "
        f"elapsed {clock(shown.snapshot.elapsed)} · {shown.rate:.1f} items/s · {eta_text(shown)}"
    )


def log_line(shown: Figures) -> str:
    """The whole picture in one line, for logs: no wrapping, no colour, greppable."""
    kinds = " · ".join(
        f"{line.kind} {_of(line.finished, line.total)} {_percent(line.percent)}"
        + (f" ({line.not_done} not done)" if line.not_done else "")
        for line in shown.kinds
    )
    parts = [headline(shown), kinds, activity_text(shown.snapshot), money_text(shown.snapshot)]
    if shown.snapshot.stuck:
        parts.append("stuck: " + "; ".join(shown.snapshot.stuck))
    return " · ".join(part for part in parts if part)


def render_figures(shown: Figures) -> Group:
    table = Table(box=box.SIMPLE_HEAD, title="relaybatch run", title_justify="left", pad_edge=False)
    table.add_column("kind", no_wrap=True)
    table.add_column("progress", min_width=10, ratio=1)
    for header in ("finished/total", "%", "not done", "per s", "ETA"):
        table.add_column(header, justify="right", no_wrap=True)
    for line in shown.kinds:
        bar = ProgressBar(total=float(line.total or 1), completed=float(line.finished if line.total else 0))
        table.add_row(
            line.kind,
            bar,
            _of(line.finished, line.total),
            _percent(line.percent),
            str(line.not_done),
            f"{line.rate:.1f}",
            clock(line.eta),
        )
    if len(shown.kinds) > 1:
        table.add_section()
        completed = float(shown.finished if shown.total else 0)
        bar = ProgressBar(total=float(shown.total or 1), completed=completed)
        finished, not_done = _of(shown.finished, shown.total), str(shown.finished - shown.done)
        rate, eta = f"{shown.rate:.1f}", clock(shown.eta)
        table.add_row("total", bar, finished, _percent(shown.percent), not_done, rate, eta)
    parts: list[Table | Text] = [table, Text(headline(shown)), Text(activity_text(shown.snapshot))]
    parts.append(Text(money_text(shown.snapshot)))
    for stuck in shown.snapshot.stuck:
        parts.append(Text(f"stuck past its render deadline: {stuck}"))
    if shown.snapshot.stopped:
        parts.append(Text(f"stopping: {shown.snapshot.stopped}"))
    return Group(*parts)


def render(snapshot: Snapshot) -> Group:
    """The live display of one snapshot (rates since the execution began)."""
    rates = Rates()
    rates.add(snapshot)
    return render_figures(figures(snapshot, rates))


# -- the two reporters -----------------------------------------------------------------------


class RichProgress:
    """A live table on a terminal, redrawn four times a second."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or output_console(stderr=True)
        self.live: Live | None = None
        self.rates = Rates()

    def update(self, snapshot: Snapshot) -> None:
        self.rates.add(snapshot)
        view = render_figures(figures(snapshot, self.rates))
        if self.live is None:
            self.live = Live(view, console=self.console, refresh_per_second=4, transient=False)
            self.live.start()
        else:
            self.live.update(view)

    def finish(self, snapshot: Snapshot) -> None:
        self.update(snapshot)
        if self.live is not None:
            self.live.stop()
            self.live = None


class PlainProgress:
    """One line every ``every`` seconds and a summary at the end, for output that is not a terminal."""

    def __init__(
        self,
        file: IO[str],
        every: float = DEFAULT_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.file = file
        self.every = every
        self.clock = clock
        self.rates = Rates()
        self.last: float | None = None

    def _write(self, text: str) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self.file.write(f"{stamp} {text}\n")
        self.file.flush()

    def update(self, snapshot: Snapshot) -> None:
        self.rates.add(snapshot)
        now = self.clock()
        # The first line at once, so a log shows the run started and what it has to do.
        if self.last is None or now - self.last >= self.every:
            self.last = now
            self._write("progress: " + log_line(figures(snapshot, self.rates)))

    def finish(self, snapshot: Snapshot) -> None:
        self.rates.add(snapshot)
        verb = f"stopped ({snapshot.stopped})" if snapshot.stopped else "finished"
        self._write(f"run {verb}: " + log_line(figures(snapshot, self.rates)))


def progress_for(file: IO[str], every: float = DEFAULT_EVERY_SECONDS) -> ProgressReporter:
    """A live table when ``file`` is a terminal, periodic log lines otherwise."""
    if file.isatty():
        return RichProgress(output_console(file=file))
    return PlainProgress(file, every)
