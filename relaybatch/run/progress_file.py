"""A store folder's progress file (``progress.json``): its counts and spend, for the commands that
show a run with partitions from any host (DESIGN.md invariant 11: never another host's SQLite).

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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from relaybatch.engine.states import CANCELLED, DONE, FAILED, SUPERSEDED, UNCERTAIN
from relaybatch.files import write_text_atomically
from relaybatch.run_folder import RunPaths

if TYPE_CHECKING:
    from relaybatch.engine import ProgressReporter
    from relaybatch.engine.progress import Snapshot

# Often enough for a person following a fleet; a write costs well under a millisecond.
EVERY_SECONDS = 5.0
FORMAT = 1
_ENDED = (DONE, FAILED, UNCERTAIN, CANCELLED)


@dataclass(frozen=True)
class FolderProgress:
    """A store folder's figures as its owner last wrote them."""

    counts: dict[str, int]  # items per state (superseded ones apart)
    known_usd: Decimal
    unknown_usd: Decimal  # worst case held for calls of unknown outcome or price
    reserved_usd: Decimal  # calls in flight, at their worst case
    written_at: str
    host: str
    pid: int
    live: bool  # written during an execution (from its snapshots), not from the stores
    execution: dict[str, Any] = field(default_factory=dict)  # started_at, ended_at, stop_reason
    stopped: str | None = None

    @property
    def total(self) -> int:
        return sum(count for state, count in self.counts.items() if state != SUPERSEDED)


def read_progress(paths: RunPaths) -> FolderProgress | None:
    try:
        value = json.loads(paths.progress.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        return None
    return FolderProgress(
        {str(state): int(count) for state, count in (value.get("counts") or {}).items()},
        Decimal(value.get("known_usd") or "0"),
        Decimal(value.get("unknown_usd") or "0"),
        Decimal(value.get("reserved_usd") or "0"),
        str(value.get("written_at") or ""),
        str(value.get("host") or ""),
        int(value.get("pid") or 0),
        bool(value.get("live")),
        dict(value.get("execution") or {}),
        value.get("stopped"),
    )


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
        counts, execution = store.count_by_state(), store.last_execution()
    known = unknown = Decimal(0)
    costs = CostStore.open_read_only(paths.cost_store)
    if costs is not None:
        try:
            spent, _ = costs.spent()
            unknown = costs.unknown_spent()
            known = spent - unknown
        finally:
            costs.close()
    _write(paths, _figures(counts, known, unknown, Decimal(0), live=False, execution=execution))


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
    ) -> None:
        self.inner, self.paths, self.every, self.clock = inner, paths, every, clock
        self.last: float | None = None

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
        try:
            _write(self.paths, record)
        except OSError:  # a full or lost share must not stop the run: the next write tries again
            self.last = None
