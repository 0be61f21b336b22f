"""Where a run keeps its files: one folder per run under the runs folder.

    <runs>/<name>/checkpoint.sqlite   items, states, events (engine.CheckpointStore)
    <runs>/<name>/costs.sqlite        the cost ledger's own store (costs.CostStore)
    <runs>/<name>/ledger.parquet      the ledger, exported
    <runs>/<name>/dashboard.html      the run's dashboard (relaybatch report)
    <runs>/<name>/results/<job>.parquet
    <runs>/<name>/media/              files the gateway returned (images, videos, audio)
    <runs>/<name>/snapshot/           results/ and ledger.parquet exported beside an execution
    <runs>/<name>/shards/<i>-of-<n>/  one folder per shard, laid out the same way
    <runs>/<name>/shards/part-<i>-of-<n>/  one per partition, with splits.json (the splits it was
                                      planned from, run/partitions.py)
    <runs>/<name>/handoff.parquet     rows settled or superseded here, for the run's other stores
    <runs>/<name>/handoff.json        ... and which state of the store they are (run/handoff.py)
    <runs>/<name>/shards/.../events.parquet  a shard's or partition's events, for reports (ditto)
    <runs>/<name>/progress.json       counts and spend, written by the store's owner (run/progress_file.py)
    <runs>/<name>/execution.lock      held by the process writing the store (run/locking.py)
    <runs>/<name>/sending.lock        held by every execution of the run: whole, or its shards (ditto)

Every other module asks ``RunPaths`` for these names instead of spelling them, and for the shard
folders' names (``shard_folder_name``, ``shard_of_folder``, ``RunPaths.shard_folders``). The module
sits below the engine (the engine's media check and the costs' reports read these folders too), so
it imports nothing of relaybatch but its errors (the default runs folder comes from the settings:
``relaybatch.settings.run_paths``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from relaybatch.errors import UserError

CHECKPOINT_NAME = "checkpoint.sqlite"
COST_STORE_NAME = "costs.sqlite"
LEDGER_NAME = "ledger.parquet"
DASHBOARD_NAME = "dashboard.html"
RESULTS_NAME = "results"
MEDIA_NAME = "media"
SHARDS_NAME = "shards"
SNAPSHOT_NAME = "snapshot"
LOCK_NAME = "execution.lock"
SENDING_LOCK_NAME = "sending.lock"
SPLITS_NAME = "splits.json"
# What a store's owner leaves for the run's other stores (run/handoff.py): its rows with work, and
# the record saying which state of the store they are.
HANDOFF_NAME = "handoff.parquet"
HANDOFF_RECORD_NAME = "handoff.json"
# A shard's or partition's events, written beside the handoff (run/handoff.py), read by reports and
# the dashboard (costs/report.py ``read_events``): each a key, state, detail, ISO time and kind.
EVENTS_NAME = "events.parquet"
EVENT_COLUMNS = ("key", "state", "detail", "at", "kind")
# A store folder's counts and spend as its owner last wrote them (run/progress_file.py).
PROGRESS_NAME = "progress.json"
# A shard's folder under <run>/shards/: "<index>-of-<count>".
_SHARD_FOLDER = re.compile(r"(\d+)-of-(\d+)")
# A partition's folder under <run>/shards/ (run/partitions.py): "part-<index>-of-<count>".
_PARTITION_FOLDER = re.compile(r"part-(\d+)-of-(\d+)")


def shard_folder_name(index: int, count: int) -> str:
    """The folder of shard ``index`` of ``count`` under the run's ``shards/``: "2-of-4"."""
    return f"{index}-of-{count}"


def partition_folder_name(index: int, count: int) -> str:
    """The folder of partition ``index`` of ``count`` under the run's ``shards/``: "part-2-of-4"."""
    return f"part-{index}-of-{count}"


def partition_of_folder(name: str) -> tuple[int, int] | None:
    """(index, count) of a partition folder's name ("part-2-of-4" -> (2, 4)); None for any other."""
    match = _PARTITION_FOLDER.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def shard_of_folder(name: str) -> tuple[int, int] | None:
    """(index, count) of a shard folder's name ("2-of-4" -> (2, 4)); None for any other name."""
    match = _SHARD_FOLDER.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @classmethod
    def for_run(cls, runs_dir: Path, name: str) -> RunPaths:
        """The folder of run ``name``: one folder right under ``runs_dir``, never elsewhere."""
        if not name.strip() or name in (".", "..") or any(sign in name for sign in ("/", "\\", "\0")):
            raise UserError(
                f"run name {name!r} is not a folder name: give one without '/', other than '.' or "
                "'..' (--run-name, or run.name in the manifest; letters, digits, . _ - are safest)"
            )
        return cls(runs_dir / name)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_NAME

    @property
    def cost_store(self) -> Path:
        return self.root / COST_STORE_NAME

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER_NAME

    @property
    def results(self) -> Path:
        return self.root / RESULTS_NAME

    @property
    def media(self) -> Path:
        return self.root / MEDIA_NAME

    @property
    def shards(self) -> Path:
        return self.root / SHARDS_NAME

    @property
    def snapshot(self) -> RunPaths:
        """Where an export beside an execution writes (run/snapshot.py): its ``results`` and
        ``ledger``, apart from the files the execution itself writes when it ends."""
        return RunPaths(self.root / SNAPSHOT_NAME)

    @property
    def dashboard(self) -> Path:
        return self.root / DASHBOARD_NAME

    def shard(self, index: int, count: int) -> RunPaths:
        """The folder of shard ``index`` of ``count`` of this run."""
        return RunPaths(self.shards / shard_folder_name(index, count))

    def shard_folders(self) -> list[RunPaths]:
        """Every shard folder of this run that exists (any split), in name order."""
        if not self.shards.is_dir():
            return []
        found = [path for path in self.shards.iterdir() if path.is_dir() and shard_of_folder(path.name)]
        return [RunPaths(path) for path in sorted(found)]

    def partition(self, index: int, count: int) -> RunPaths:
        """The folder of partition ``index`` of ``count`` of this run."""
        return RunPaths(self.shards / partition_folder_name(index, count))

    def partition_folders(self) -> list[RunPaths]:
        """Every partition folder of this run that exists (any split), by split and index."""
        if not self.shards.is_dir():
            return []
        found = [
            (split[1], split[0], path)
            for path in self.shards.iterdir()
            if path.is_dir() and (split := partition_of_folder(path.name))
        ]
        return [RunPaths(path) for _, _, path in sorted(found)]

    @property
    def handoff(self) -> Path:
        """The rows another store of the run takes over from this one (run/handoff.py)."""
        return self.root / HANDOFF_NAME

    @property
    def handoff_record(self) -> Path:
        """What ``handoff`` is: the run, its manifest, counts, and the store's stamp (run/handoff.py)."""
        return self.root / HANDOFF_RECORD_NAME

    @property
    def events(self) -> Path:
        """A shard's or partition's events as its owner last wrote them (run/handoff.py)."""
        return self.root / EVENTS_NAME

    @property
    def progress(self) -> Path:
        """The folder's counts and spend as its owner last wrote them (run/progress_file.py)."""
        return self.root / PROGRESS_NAME

    @property
    def splits_planned(self) -> Path:
        """A partition folder's list of the splits its store was planned from (run/partitions.py)."""
        return self.root / SPLITS_NAME

    def partition_file(self, count: int) -> Path:
        """The run's split into ``count`` partitions (JSON, run/partitions.py)."""
        return self.root / f"partitions-{count}.json"

    def store_folders(self) -> list[RunPaths]:
        """This run's folder, then each of its shards' and partitions': every folder that may hold
        a run's stores."""
        return [self, *self.shard_folders(), *self.partition_folders()]

    def checkpoints(self) -> list[Path]:
        """Every checkpoint store of this run that exists: its own, then each shard's (any split)."""
        return [folder.checkpoint for folder in self.store_folders() if folder.checkpoint.exists()]

    @property
    def shard_split(self) -> tuple[int, int] | None:
        """(index, count) when this is a shard's folder (``<run>/shards/<i>-of-<n>``), else None."""
        return shard_of_folder(self.root.name) if self.root.parent.name == SHARDS_NAME else None

    @property
    def shard_count(self) -> int | None:
        """N of a shard's folder (the split it belongs to), None for the run's own folder."""
        split = self.shard_split
        return split[1] if split else None

    @property
    def lock(self) -> Path:
        return self.root / LOCK_NAME

    @property
    def run_root(self) -> Path:
        """The whole run's folder: this one, or for a shard's folder the run it is a share of."""
        return self.root.parent.parent if self.root.parent.name == SHARDS_NAME else self.root

    def require_existing(self) -> RunPaths:
        if not self.checkpoint.exists():
            if any(folder.checkpoint.exists() for folder in self.shard_folders()):
                raise UserError(
                    f"run {self.name} has only shard stores so far: `relaybatch merge {self.name}` "
                    "folds them into the run (or run the manifest without --shard)"
                )
            raise UserError(f"no run at {self.root}: run a manifest first (relaybatch run FILE)")
        return self
