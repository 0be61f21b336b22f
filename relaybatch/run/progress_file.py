"""Writing a store folder's progress file (``progress.json``; relaybatch/folder_progress.py reads
it): its counts and spend, for the commands that show a run with partitions from any host
(DESIGN.md invariant 11: never another host's SQLite).

The store's owner writes it (temporary name, then rename): every ``EVERY_SECONDS`` while an
execution runs and when it finishes (``ProgressFile``, from the engine's progress snapshots: no
query of the store), and exactly, from its stores, whenever it lets go of the store (``write_exact``,
beside the handoff files, run/handoff.py). `relaybatch status` reads it for each partition, beside
who holds the folder's lock now (run/locking.py ``holder_of``: the lock file, not the store).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from relaybatch.engine.states import CANCELLED, DONE, FAILED, UNCERTAIN
from relaybatch.files import write_text_atomically
from relaybatch.folder_progress import FORMAT
from relaybatch.run_folder import RunPaths

if TYPE_CHECKING:
    from relaybatch.engine import ProgressReporter
    from relaybatch.engine.progress import Snapshot
    from relaybatch.engine.spend import SpendFigures

# Often enough for a person following a fleet; a write costs well under a millisecond.
EVERY_SECONDS = 5.0
_ENDED = (DONE, FAILED, UNCERTAIN, CANCELLED)


def _write(paths: RunPaths, record: dict[str, Any]) -> None:
    record = {
        "format": FORMAT,
        "written_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        **record,
    }
    write_text_atomically(paths.progress, json.dumps(record, sort_keys=True))


def write_exact(paths: RunPaths) -> None:
    """The figures from the folder's stores (the caller owns them: it holds the folder's lock)."""
    from relaybatch.costs import CostStore
    from relaybatch.engine import CheckpointStore

    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        counts, execution, settings = store.count_by_state(), last_execution(store), store.run_settings()
    known = unknown = Decimal(0)
    costs = CostStore.open_read_only(paths.cost_store)
    if costs is not None:
        try:
            spent, _ = costs.spent()
            unknown = costs.unknown_spent()
            known = spent - unknown
        finally:
            costs.close()
    record = _figures(counts, known, unknown, Decimal(0), live=False, execution=execution)
    _write(paths, {**record, "settings": settings})


def last_execution(store: Any) -> dict[str, Any]:
    """How the store's last execution began and ended, and what started it (``entry``: cli, flow,
    deployment, schedule, api) under which name there (``label``: a Prefect flow run's name, which
    `relaybatch status` looks up on the server for its state and worker)."""
    last = store.executions(limit=1)
    started = {"entry": last[0].get("entry"), "label": last[0].get("label")} if last else {}
    return {**store.last_execution(), **started}


def _figures(
    counts: dict[str, int],
    known: Decimal,
    unknown: Decimal,
    reserved: Decimal,
    live: bool,
    execution: dict[str, Any] | None = None,
    stopped: str | None = None,
) -> dict[str, Any]:
    return {
        "counts": counts,
        "known_usd": str(known),
        "unknown_usd": str(unknown),
        "reserved_usd": str(reserved),
        "live": live,
        "execution": execution or {},
        "stopped": stopped,
    }


def _ceilings(money: SpendFigures) -> dict[str, Any]:
    """The most the store's own spend can reach in this execution under the budgets it enforces,
    the run's and each job's (engine/spend.py ``SpendFigures.ceiling_usd``): the run's other
    stores count that for it while it executes (costs/run_budgets.py ``folder_spent``), since its
    figures here are up to ``EVERY_SECONDS`` old. Written from the execution's first snapshot on,
    which the engine takes before it sends anything (engine/runner.py ``run``: its reporter starts
    first)."""
    ceiling = money.ceiling_usd
    return {
        "ceiling_usd": None if ceiling is None else str(ceiling),
        "job_ceilings_usd": {job: str(usd) for job, usd in money.job_ceilings},
    }


def snapshot_counts(snapshot: Snapshot) -> dict[str, int]:
    """Items per state from an execution's snapshot: each kind's ended items before it and since,
    and the rest of the kind's items as open (``pending`` here)."""
    counts = dict.fromkeys(_ENDED, 0)
    total = 0
    for kind, totals in snapshot.kinds.items():
        total += totals.total
        for state in _ENDED:
            counts[state] += totals.before.get(state, 0) + snapshot.finished.get(f"{kind}:{state}", 0)
    counts = {state: count for state, count in counts.items() if count}
    counts["pending"] = max(total - sum(counts.values()), 0)
    return counts


class ProgressFile:
    """A ProgressReporter that passes every snapshot on to ``inner`` and writes the folder's
    progress file every ``every`` seconds and at the finish."""

    def __init__(
        self,
        inner: ProgressReporter,
        paths: RunPaths,
        every: float = EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        store: Any = None,
    ) -> None:
        self.inner, self.paths, self.every, self.clock = inner, paths, every, clock
        self.last: float | None = None
        # The store's settings and this execution's start, read once (``store``: the execution's).
        self.fixed: dict[str, Any] = {}
        if store is not None:
            self.fixed = {"settings": store.run_settings(), "execution": last_execution(store)}

    def update(self, snapshot: Snapshot) -> None:
        self.inner.update(snapshot)
        now = self.clock()
        if self.last is None or now - self.last >= self.every:
            self.last = now
            self._write(snapshot)

    def finish(self, snapshot: Snapshot) -> None:
        self.inner.finish(snapshot)
        self._write(snapshot)

    def _write(self, snapshot: Snapshot) -> None:
        money = snapshot.money
        known = unknown = reserved = Decimal(0)
        if money is not None:
            known = money.spent_usd - money.elsewhere_usd
            unknown, reserved = money.unknown_usd, money.reserved_usd
        record = _figures(snapshot_counts(snapshot), known, unknown, reserved, True, stopped=snapshot.stopped)
        if money is not None:  # what the run's other stores count for this execution while it goes on
            record.update(_ceilings(money))
        try:
            _write(self.paths, {**record, **self.fixed})
        except OSError:  # a full or lost share must not stop the run: the next write tries again
            self.last = None
