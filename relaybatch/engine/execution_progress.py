"""The figures an execution shows while it runs: its progress snapshot (the live table, the log
lines, telemetry: progress.py draws them) and the limiter's changes recorded in the checkpoint
(the dashboard's timeline)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from relaybatch.engine.progress import Snapshot, limiter_figures
from relaybatch.engine.spend import ReportsSpend
from relaybatch.engine.states import LIMITER_EVENT
from relaybatch.engine.store import CheckpointStore

if TYPE_CHECKING:
    from relaybatch.engine.runner import Execution


def snapshot_of(execution: Execution) -> Snapshot:
    """The execution's figures now: finished per kind and state, in flight, polling, spent, why
    it stopped, what is left, the limiter's."""
    return Snapshot(
        finished=dict(execution.finished),
        in_flight=execution.in_flight - execution.waiting_for_room - execution.waiting_for_token,
        polling=execution.poller.waiting,
        elapsed=time.monotonic() - execution.started,
        spent_usd=execution.spent if execution.priced else None,
        stopped=execution.stop_reason,
        remaining=max(0, execution.open_at_start - sum(execution.finished.values())),
        kinds=execution.kinds_at_start,
        queued=execution.queue.qsize(),
        retries=execution.retries,
        money=execution.spend.figures() if isinstance(execution.spend, ReportsSpend) else None,
        stuck=execution.poller.stuck_lines(),
        **limiter_figures(execution.limiter),
    )


class LimiterEvents:
    """A checkpoint event when the limit or the 429 count changed, for the dashboard's timeline."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.recorded: dict[str, Any] | None = None

    def record(self, snapshot: Snapshot) -> None:
        if snapshot.limit_source is None:
            return
        figures = {
            "rpm": snapshot.limit_rpm,
            "source": snapshot.limit_source,
            "rate_limited": snapshot.rate_limited,
        }
        if figures != self.recorded:
            self.recorded = figures
            self.store.record_run_event(LIMITER_EVENT, figures)
