"""Split one manifest's items into N shards that run as separate flow runs, then merge the results.

An item belongs to a shard by a hash of its key, so every process (on any machine) computes the
same split from the same manifest without coordinating, and an item can never be in two shards:
nothing is sent twice. Each shard keeps its own checkpoint store under the run folder
(``<run>/shards/<i>-of-<n>/``), written by that shard's process only: SQLite files are never
written by two processes, only the folder that holds them is shared.

Shards are views of one run: planning a shard skips every item that the run's own store or any
other shard's store (of any split) has settled (done, in flight, uncertain), so a shard never
resends work; ``merge`` (and an unsharded run of the same manifest) folds the shard stores into
the run's store, so status, export, report and the dashboard see one run. ``merge`` is refused
while the run or any of the shards it folds is executing (relaybatch/run/locking.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from relaybatch.errors import UserError
from relaybatch.run.locking import merging
from relaybatch.run_folder import RunPaths, shard_folder_name

_SHARD_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise UserError(f"shard {self.index}/{self.count}: need 1 <= index <= count")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/4"`` -> the second of four shards."""
        match = _SHARD_TEXT.match(text)
        if match is None:
            raise UserError(f"shard {text!r}: write it as INDEX/COUNT, e.g. 1/2")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def folder_name(self) -> str:
        return shard_folder_name(self.index, self.count)

    def contains(self, key: str) -> bool:
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    def paths(self, run: RunPaths) -> RunPaths:
        return run.shard(self.index, self.count)


def shard_folders(run: RunPaths, count: int) -> list[RunPaths]:
    """Every shard's folder for a split into ``count``; a missing one is an error naming it."""
    folders = [Shard(index, count).paths(run) for index in range(1, count + 1)]
    missing = [str(folder.root) for folder in folders if not folder.checkpoint.exists()]
    if missing:
        raise UserError(f"cannot merge {run.root.name}: shards not run yet: {', '.join(missing)}")
    return folders


def shard_count_on_disk(run: RunPaths) -> int:
    """The split the run's shard folders were made with; exactly one split may be present."""
    counts = {split[1] for folder in run.shard_folders() if (split := folder.shard_split)}
    if not counts:
        raise UserError(f"no shards under {run.shards}: run `relaybatch run FILE --shard 1/N` first")
    if len(counts) > 1:
        raise UserError(f"{run.shards} holds shards of different splits ({sorted(counts)}); pass --shards N")
    return counts.pop()


def merge_shard_results(run: RunPaths, count: int | None = None) -> list[Path]:
    """Fold the shards' stores (of split ``count``, or every split on disk) into the run's own
    store, then export the run's results from it: one store, one result set, one row per item."""
    from relaybatch.engine import CheckpointStore, export_results
    from relaybatch.run.handoff import leave_handoff

    if count is not None:
        folders = shard_folders(run, count)
    else:
        shard_count_on_disk_or_any(run)
        folders = run.store_folders()[1:]  # every shard's and partition's
    # Refused while the run or one of these shards is executing (run/locking.py): the merge would
    # race the run's own writes, or fold a shard in half-done.
    with merging(run, folders):
        with CheckpointStore(run.checkpoint) as store:
            for folder in folders:
                if folder.checkpoint.exists():
                    store.absorb(folder.checkpoint)
            written = export_results(store, run.results)
        leave_handoff(run)  # what the run's stores take from it now (run/handoff.py)
        return written


def shard_count_on_disk_or_any(run: RunPaths) -> None:
    """Raise when the run has no shard folders at all."""
    if not run.store_folders()[1:]:
        raise UserError(f"no shards under {run.shards}: run `relaybatch run FILE --shard 1/N` first")
