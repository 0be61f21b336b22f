"""A store folder's progress file while an execution runs (relaybatch/run/progress_file.py): written
from the engine's snapshots every few seconds and at the finish, with the store's own spend."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from relaybatch.engine import Snapshot
from relaybatch.engine.progress import KindTotals
from relaybatch.engine.spend import SpendFigures
from relaybatch.folder_progress import read_progress
from relaybatch.run import RunPaths
from relaybatch.run.progress_file import ProgressFile


class Passed:
    def __init__(self) -> None:
        self.updates = 0
        self.finished = 0

    def update(self, snapshot: Snapshot) -> None:
        self.updates += 1

    def finish(self, snapshot: Snapshot) -> None:
        self.finished += 1


def snapshot(done_now: int, stopped: str | None = None) -> Snapshot:
    """20 chat items: 5 done and 1 failed before this execution, ``done_now`` done since; 1.50 USD
    known of which 1.00 spent by the run's other stores, 0.20 unknown, 0.10 in flight."""
    money = SpendFigures(
        Decimal("1.50"), Decimal("0.20"), Decimal("0.10"), None, elsewhere_usd=Decimal("1.00")
    )
    return Snapshot(
        finished={"chat:done": done_now},
        in_flight=2,
        polling=0,
        elapsed=1.0,
        spent_usd=None,
        stopped=stopped,
        kinds={"chat": KindTotals(20, 6, {"done": 5, "failed": 1})},
        money=money,
    )


def test_an_execution_writes_its_counts_and_own_spend_every_few_seconds_and_at_its_finish(
    tmp_path: Path,
) -> None:
    paths = RunPaths(tmp_path / "part-1-of-2")
    paths.root.mkdir()
    now = [0.0]
    inner = Passed()
    progress = ProgressFile(inner, paths, every=5.0, clock=lambda: now[0])

    progress.update(snapshot(1))
    first = read_progress(paths)
    now[0] = 4.0
    progress.update(snapshot(3))  # within 5 s of the last write: passed on, not written
    assert read_progress(paths) == first
    now[0] = 5.0
    progress.update(snapshot(4))
    progress.finish(snapshot(9, stopped="budget reached"))

    last = read_progress(paths)
    assert inner.updates == 3 and inner.finished == 1
    assert first is not None and first.counts == {"done": 6, "failed": 1, "pending": 13} and first.live
    assert last is not None and last.counts == {"done": 14, "failed": 1, "pending": 5}
    assert last.stopped == "budget reached" and last.total == 20
    assert (last.known_usd, last.unknown_usd, last.reserved_usd) == (
        Decimal("0.50"),
        Decimal("0.20"),
        Decimal("0.10"),
    )
