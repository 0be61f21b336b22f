"""The progress display of a long run: done per kind, in flight, polling, failures, rate, ETA, dollars."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from relaybatch.console import output_console
from relaybatch.engine.states import DONE


@dataclass(frozen=True)
class Snapshot:
    """What the engine reports twice a second. ``finished`` counts "kind:state" this execution."""

    finished: dict[str, int]
    in_flight: int
    polling: int
    elapsed: float
    spent_usd: Decimal | None
    stopped: str | None
    remaining: int | None = None

    def count(self, state: str) -> int:
        return sum(number for name, number in self.finished.items() if name.endswith(f":{state}"))

    @property
    def rate(self) -> float:
        """Items finished per second so far in this execution."""
        return sum(self.finished.values()) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        if self.remaining is None or self.rate <= 0:
            return None
        return self.remaining / self.rate


class ProgressReporter(Protocol):
    def update(self, snapshot: Snapshot) -> None: ...

    def finish(self, snapshot: Snapshot) -> None: ...


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}"


def render(snapshot: Snapshot) -> Table:
    """One table: a row per kind (done, failed, other), then the run's totals."""
    kinds = sorted({name.split(":", 1)[0] for name in snapshot.finished})
    table = Table("kind", "done", "failed", "uncertain/cancelled", title="relaybatch run", min_width=60)
    for kind in kinds:
        done = snapshot.finished.get(f"{kind}:{DONE}", 0)
        failed = snapshot.finished.get(f"{kind}:failed", 0)
        other = snapshot.finished.get(f"{kind}:uncertain", 0) + snapshot.finished.get(f"{kind}:cancelled", 0)
        table.add_row(kind, str(done), str(failed), str(other))
    dollars = "-" if snapshot.spent_usd is None else f"${snapshot.spent_usd:.4f}"
    table.caption = (
        f"in flight {snapshot.in_flight} · polling {snapshot.polling} · "
        f"{snapshot.rate:.1f} items/s · ETA {_eta(snapshot.eta_seconds)} · spent {dollars}"
        + (f"\nstopping: {snapshot.stopped}" if snapshot.stopped else "")
    )
    return table


class RichProgress:
    """A live table on the terminal (rich prints it once at the end when it is not a terminal)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or output_console(stderr=True)
        self.live: Live | None = None

    def update(self, snapshot: Snapshot) -> None:
        table = render(snapshot)
        if self.live is None:
            self.live = Live(table, console=self.console, refresh_per_second=2, transient=False)
            self.live.start()
        else:
            self.live.update(table)

    def finish(self, snapshot: Snapshot) -> None:
        self.update(snapshot)
        if self.live is not None:
            self.live.stop()
            self.live = None
