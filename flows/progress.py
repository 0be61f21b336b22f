"""A progress artifact that follows a running execute step, updated every few seconds.

Reading the counts is a read-only view of the checkpoint store (relaybatch.run.views; WAL lets it
read while the engine writes). Per-item updates would be one API call per item: measured Prefect
overhead makes that a bottleneck, so the artifact moves on a timer instead.

The description is what a person watching the UI acts on: items finished of all, elapsed time,
the rate since the step began, spend so far, errors grouped by type, and the request limit the
run uses now (learned from the gateway's headers, or the shared limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact

from relaybatch.engine.states import TERMINAL_STATES
from relaybatch.run import LiveLimit, counts, errors_by_type, spend_lines, total_spend
from relaybatch.shared_limit import SharedLimit

DEFAULT_EVERY_SECONDS = 5.0
ERROR_TYPES_SHOWN = 5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgressView:
    counts: dict[str, int]
    spent: Decimal
    errors: dict[str, int]  # "<state>: <error type>" -> items
    elapsed: float
    finished_at_start: int
    limit_rpm: float | None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(count for state, count in self.counts.items() if state in TERMINAL_STATES)

    @property
    def percent(self) -> float:
        return 100.0 * self.finished / self.total if self.total else 100.0

    @property
    def rate(self) -> float:
        """Items finished per second since this step began (a resume starts from its own count)."""
        done_here = self.finished - self.finished_at_start
        return done_here / self.elapsed if self.elapsed > 0 else 0.0

    def description(self) -> str:
        states = ", ".join(f"{state} {count}" for state, count in sorted(self.counts.items()))
        minutes, seconds = divmod(int(self.elapsed), 60)
        parts = [
            f"{self.finished} of {self.total} items finished ({states or 'no items'})",
            f"elapsed {minutes}m{seconds:02d}s",
            f"rate {self.rate:.1f} items/s",
            f"spent {self.spent} USD",
        ]
        if self.errors:
            shown = Counter(self.errors).most_common(ERROR_TYPES_SHOWN)
            more = len(self.errors) - len(shown)
            text = "; ".join(f"{name} x{count}" for name, count in shown)
            parts.append(f"errors: {text}" + (f"; {more} more types" if more > 0 else ""))
        else:
            parts.append("errors: none")
        limit = "open (none seen yet)" if self.limit_rpm is None else f"{self.limit_rpm:.0f} requests/min"
        parts.append(f"limit {limit}")
        return "; ".join(parts)


def read_progress(
    checkpoint: Path, started: float | None = None, finished_at_start: int = 0, limit_rpm: float | None = None
) -> ProgressView:
    """What the artifact shows for one checkpoint (``started``: when the step began, monotonic)."""
    elapsed = 0.0 if started is None else time.monotonic() - started
    return ProgressView(
        counts([checkpoint]),
        total_spend(spend_lines([checkpoint.parent])),
        errors_by_type([checkpoint]),
        elapsed,
        finished_at_start,
        limit_rpm,
    )


class _Follower:
    def __init__(self, checkpoint: Path, shared_limit: SharedLimit | None) -> None:
        self.checkpoint = checkpoint
        self.live_limit = LiveLimit()  # the execution shows its limiter here while it runs
        self.started = time.monotonic()
        self.finished_at_start = read_progress(checkpoint).finished
        self.limit_rpm: float | None = shared_limit.rpm if shared_limit else None

    def view(self) -> ProgressView:
        learned = self.live_limit.requests_per_minute
        if learned is not None:  # kept after the step ends, for the final update
            self.limit_rpm = learned
        return read_progress(self.checkpoint, self.started, self.finished_at_start, self.limit_rpm)


async def _follow(artifact_id: UUID, follower: _Follower, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        view = follower.view()
        try:
            await aupdate_progress_artifact(artifact_id, view.percent, description=view.description())
        except Exception as exc:  # the UI missing one update must never stop a paid run
            log.warning("progress artifact not updated: %s", type(exc).__name__)


@contextlib.asynccontextmanager
async def progress_artifact(
    checkpoint: Path, every: float = DEFAULT_EVERY_SECONDS, limit: SharedLimit | None = None
) -> AsyncIterator[LiveLimit]:
    """Show the run's progress in the Prefect UI while the body runs; a final update on exit. Yields
    where the execution shows the limit it uses (``execute_run(live_limit=)``)."""
    follower = _Follower(checkpoint, limit)
    view = follower.view()
    artifact_id = await acreate_progress_artifact(view.percent, description=view.description())
    task = asyncio.create_task(_follow(artifact_id, follower, every))
    try:
        yield follower.live_limit
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        view = follower.view()
        # Shielded: on cancellation the last state of the run still reaches the UI.
        with contextlib.suppress(Exception):
            await asyncio.shield(
                aupdate_progress_artifact(artifact_id, view.percent, description=view.description())
            )
