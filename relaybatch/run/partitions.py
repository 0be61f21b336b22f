"""Partitions: a run's rows cut into N input ranges, each planned and sent on its own.

A shard (sharding.py) takes its items by a hash of their keys, so each of N shards expands the
whole manifest to find its own. A partition takes a range of each job's rows instead
(relaybatch/manifests/ranges.py: byte ranges of CSV and JSONL files, Parquet row groups, inline
item positions), so it reads, validates and plans only those rows: its first request goes out
as soon as its own rows are planned, whatever the size of the manifest. A run can have many more
partitions than machines; whoever runs one next takes the next (the Prefect work pool does it).

Partitions are views of one run, as shards are: each keeps its own store under
``<run>/shards/part-<i>-of-<n>/``, planning one skips what the run's other stores settled and takes
back what one of them superseded, and ``merge`` and an unsharded run fold them into the run's
store (so ``status``, ``report`` and exports show one run). The split is made once, by whoever
submits the partitions (``split``), and handed to each partition with its ranges; the whole
manifest is validated there once (repeated requests across partitions are found there).

Storage contract (docs/prefect.md): a partition opens no other store's SQLite. It reads nothing
of another partition when both were only ever planned from the same split, because their rows
cannot meet: each store holds rows of its own range only, and the ranges of one split are
disjoint. Each partition folder lists the splits its store was planned from (``splits.json``,
written before its store is planned), so a partition tells those siblings apart from the stores
that may hold its rows (the run's own store, shards, partitions of another split or of an edited
manifest); only those are read, from the handoff files their owners left (run/handoff.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relaybatch.errors import UserError
from relaybatch.manifests import Validation
from relaybatch.manifests import ranges as input_ranges
from relaybatch.manifests.ranges import Ranges
from relaybatch.run_folder import RunPaths, partition_of_folder

if TYPE_CHECKING:
    from relaybatch.engine import CheckpointStore
    from relaybatch.manifests import Manifest

Check = Callable[[Validation], None]

_PARTITION_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Partition:
    """Partition ``index`` (1-based) of ``count``, with its range of each job's rows."""

    index: int
    count: int
    ranges: Ranges = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise UserError(f"partition {self.index}/{self.count}: need 1 <= index <= count")

    @classmethod
    def parse(cls, text: str) -> tuple[int, int]:
        """``"2/12"`` -> (2, 12)."""
        match = _PARTITION_TEXT.match(text)
        if match is None:
            raise UserError(f"partition {text!r}: write it as INDEX/COUNT, e.g. 1/12")
        cls(int(match[1]), int(match[2]))  # checks the numbers
        return int(match[1]), int(match[2])

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def paths(self, run: RunPaths) -> RunPaths:
        return run.partition(self.index, self.count)

    def to_json(self) -> dict[str, Any]:
        """The partition as a flow parameter (plain JSON)."""
        return {"index": self.index, "count": self.count, "ranges": input_ranges.to_json(self.ranges)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Partition:
        return cls(int(value["index"]), int(value["count"]), input_ranges.from_json(value["ranges"]))


def split(manifest_path: Path, count: int) -> list[Partition]:
    """The manifest's rows as ``count`` partitions. Reads the data files' bytes once (text files:
    line starts and quotes; Parquet: the footer) but parses no row."""
    from relaybatch.manifests import open_manifest

    if count < 1:
        raise UserError(f"partitions: need 1 or more, not {count}")
    manifest = open_manifest(manifest_path)
    cuts = input_ranges.split(manifest, count)
    return [Partition(number + 1, count, ranges) for number, ranges in enumerate(cuts)]


@dataclass(frozen=True)
class PartitionSplit:
    """A run's partitions as prepared once: the manifest, its identity, each data file's size, and
    each input file's stamp (``file_stamp``) taken before the whole manifest was validated."""

    manifest: str
    identity: str
    sizes: dict[str, int]
    partitions: list[Partition]
    stamps: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        value = {
            "manifest": self.manifest,
            "identity": self.identity,
            "sizes": self.sizes,
            "partitions": [partition.to_json() for partition in self.partitions],
        }
        if self.stamps:  # a split made before stamps were kept keeps its JSON, so its digest
            value["stamps"] = self.stamps
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PartitionSplit:
        return cls(
            str(value["manifest"]),
            str(value["identity"]),
            {str(path): int(size) for path, size in value["sizes"].items()},
            [Partition.from_json(partition) for partition in value["partitions"]],
            {str(path): [int(n) for n in stamp] for path, stamp in (value.get("stamps") or {}).items()},
        )

    def validated_as_they_are(self) -> bool:
        """Whether every input file (the manifest and each data file) is the one the whole
        manifest was validated from when the split was made: the same stamp. A partition then
        need not validate its rows again (the split did, with every row and across partitions);
        any edit, copy over or replacement since changes a stamp, and its rows are validated."""
        return bool(self.stamps) and all(
            file_stamp(Path(path)) == stamp for path, stamp in self.stamps.items()
        )


def file_stamp(path: Path) -> list[int] | None:
    """A file's size, modification and change times (ns) and inode: writing to it, replacing it or
    copying another over it (even keeping its modification time) changes at least one; None when
    it cannot be read."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def split_file(run: RunPaths, count: int) -> Path:
    """Where a run's split into ``count`` partitions is kept (JSON: no store reads another's)."""
    return run.partition_file(count)


def prepare(manifest_path: Path, run: RunPaths, count: int, check: Check | None = None) -> PartitionSplit:
    """Validate the whole manifest once, check it belongs to the run, cut it into ``count``
    partitions and keep the split in the run's folder (``split_file``); returns it.

    The one pass over every row partitions themselves never make: repeated requests or ids across
    partitions are found here, and the run identity (every file's SHA-256) is taken here."""
    import json

    from relaybatch.files import write_text_atomically

    # Stamped before the validation: a file changed while it is validated gets a stamp of its own.
    stamps = {path: file_stamp(Path(path)) for path in _data_files(manifest_path)}
    identity = whole_identity(manifest_path, run, check)
    partitions = split(manifest_path, count)
    sizes = {path: Path(path).stat().st_size for path in _data_files(manifest_path)}
    known = {path: stamp for path, stamp in stamps.items() if stamp is not None}
    prepared = PartitionSplit(
        str(manifest_path.resolve()), identity, sizes, partitions, known if len(known) == len(stamps) else {}
    )
    run.root.mkdir(parents=True, exist_ok=True)
    write_text_atomically(split_file(run, count), json.dumps(prepared.to_json()))
    return prepared


def load_split(run: RunPaths, count: int, manifest_path: Path) -> PartitionSplit:
    """The split prepared for ``count`` partitions of this manifest; a located error when there is
    none, or it was made from another manifest."""
    import json

    path = split_file(run, count)
    if not path.is_file():
        raise UserError(
            f"run '{run.name}' has no split into {count} partitions: make it first with "
            f"`relaybatch partition {manifest_path} --partitions {count}`"
        )
    prepared = PartitionSplit.from_json(json.loads(path.read_text()))
    if prepared.manifest != str(manifest_path.resolve()):
        raise UserError(
            f"the split into {count} partitions at {path} was made from {prepared.manifest}, "
            f"not {manifest_path}: make it again with "
            f"`relaybatch partition {manifest_path} --partitions {count}`"
        )
    return prepared


def check_unchanged(prepared: PartitionSplit, partition: Partition) -> None:
    """Refuse a partition whose input files changed size since the split: its byte offsets could
    cut rows in two. (A same-size edit is not seen here: split again after editing.)"""
    for path, size in prepared.sizes.items():
        now = Path(path).stat().st_size if Path(path).exists() else -1
        if now != size:
            raise UserError(
                f"{path} changed since the run was split into {partition.count} partitions "
                f"({size} bytes then, {now} now): split it again (relaybatch partition ... --partitions "
                f"{partition.count}) or run it whole"
            )


def _data_files(manifest_path: Path) -> list[str]:
    from relaybatch.manifests import open_manifest
    from relaybatch.run import fingerprint

    return list(fingerprint.input_paths(open_manifest(manifest_path)))


def whole_identity(manifest_path: Path, run: RunPaths, check: Check | None = None) -> str:
    """Validate every row of the manifest once and return its run identity (identity.py), refusing
    a manifest that is not this run's."""
    from relaybatch.files import scratch_folder
    from relaybatch.manifests import open_manifest
    from relaybatch.manifests.images import noting_image_reads
    from relaybatch.run import fingerprint, identity

    manifest = open_manifest(manifest_path)
    images: dict[str, str] = {}

    def note(path: Path, raw: bytes) -> None:
        images.setdefault(str(path.resolve()), hashlib.sha256(raw).hexdigest())

    with scratch_folder("relaybatch-plan-") as seen_in, noting_image_reads(note):
        validation = manifest.validate(seen_in=seen_in)
    if check is not None:
        check(validation)
    validation.raise_if_invalid()
    files = {
        path: fingerprint.read_file(Path(path), role)[0].sha256
        for path, role in fingerprint.input_paths(manifest).items()
    }
    resolved = manifest_path.resolve()
    inputs = identity.identity_of(resolved, files, images)
    identity.check_identity(run, run.store_folders(), resolved, inputs, files[str(resolved)])
    return inputs


def plan_partition(
    manifest_path: Path,
    runs_dir: Path | None,
    index: int,
    count: int,
    overrides: Any = None,
    check: Check | None = None,
    hold: contextlib.ExitStack | None = None,
) -> Any:
    """Plan partition ``index`` of the run's prepared split into ``count``: validate and plan only
    its rows, into ``<run>/shards/part-<index>-of-<count>/`` (returns a PlannedRun). Without
    ``check``, rows of files the split validated as they are now (``validated_as_they_are``) are
    not validated again: one pass over them, the plan's (a bad row stops it, and it adds nothing).

    Rows another store of the run settled or superseded are taken over (``OtherStores.lend_work``)
    before the plan, so nothing done or paid for elsewhere is sent again and a superseded item
    comes back; what this store held that the range no longer has is superseded, as in any plan."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.files import scratch_folder
    from relaybatch.manifests import open_manifest
    from relaybatch.prefect_server import configured_api_url
    from relaybatch.run import identity
    from relaybatch.run.assemble import PlannedRun, RunOverrides, stored_settings
    from relaybatch.run.locking import executing
    from relaybatch.settings import run_paths

    overrides = overrides or RunOverrides()
    manifest = open_manifest(manifest_path)
    name = manifest.run_name if overrides.run_name is None else overrides.run_name
    run = run_paths(runs_dir, name)
    prepared, partition = _partition_of(run, manifest_path, index, count)
    resolved = manifest_path.resolve()
    paths, digest = partition.paths(run), split_digest(prepared)
    consulted = stores_to_consult(run, paths, digest)
    identity.check_identity(run, [*consulted, paths], resolved, prepared.identity, "", own=paths)
    with scratch_folder("relaybatch-plan-") as seen_in, contextlib.ExitStack() as planning:
        # The split validated every row of these files as they are (the flow's partitions: no
        # pass before the plan; a bad row would still stop the plan, which then adds nothing).
        if check is not None or not prepared.validated_as_they_are():
            _validate_range(manifest, partition, seen_in, check)
        (hold or planning).enter_context(executing(paths))
        # With a Prefect server, the server holds the run's budget and render caps for every
        # partition (relaybatch/fleet/): the store records it, so each execution uses them.
        held = configured_api_url() is not None
        settings = stored_settings(manifest, None, overrides, parts=count, held_by_server=held)
        note_split(paths, digest)  # before the store holds any row of this split's range
        with CheckpointStore(paths.checkpoint) as store:
            store.save_run(name, settings)
            store.record_manifest(str(resolved), prepared.identity)
            if consulted:  # no store may hold our rows (a fresh split): no pass over them for keys
                _take_over_work(store, consulted, manifest, partition)
            counts = store.plan_items(manifest.iter_items(partition.ranges))
    added, superseded, restored = counts.added, counts.superseded, counts.restored
    return PlannedRun(paths, f"{name} partition {index}/{count}", added, superseded, restored, name)


_LEND_CHUNK = 20_000


def _partition_of(
    run: RunPaths, manifest_path: Path, index: int, count: int
) -> tuple[PartitionSplit, Partition]:
    """The run's prepared split into ``count`` and its partition ``index``, checked unchanged."""
    prepared = load_split(run, count, manifest_path)
    if not 1 <= index <= count:
        raise UserError(f"partition {index}/{count}: need 1 <= index <= count")
    partition = prepared.partitions[index - 1]
    check_unchanged(prepared, partition)
    return prepared, partition


def _validate_range(manifest: Manifest, partition: Partition, seen_in: Path, check: Check | None) -> None:
    """The partition's rows validated (and checked by ``check``, the gateway's catalog), or
    ManifestInvalid raised with every problem."""
    validation = manifest.validate(starts=partition.ranges, seen_in=seen_in)
    if check is not None:
        check(validation)
    validation.raise_if_invalid()


def _take_over_work(
    store: CheckpointStore, consulted: list[RunPaths], manifest: Manifest, partition: Partition
) -> None:
    """The partition's rows the ``consulted`` stores settled or superseded copied into ``store``
    (``OtherStores.lend_work``, a chunk of keys at a time), before the partition's plan."""
    from relaybatch.run.assemble import OtherStores

    keys = [item.key for item in manifest.iter_items(partition.ranges)]
    others = OtherStores(consulted)
    try:
        for start in range(0, len(keys), _LEND_CHUNK):
            others.lend_work(store, keys[start : start + _LEND_CHUNK])
    finally:
        others.close()


def split_digest(prepared: PartitionSplit) -> str:
    """One split's identity: the sha256 of its JSON (the manifest, its identity, the files' sizes
    and every partition's ranges). Splitting again after an edit gives another."""
    import json

    return hashlib.sha256(json.dumps(prepared.to_json(), sort_keys=True).encode()).hexdigest()


def splits_planned(paths: RunPaths) -> list[str] | None:
    """The splits a partition's store was planned from (``splits.json``); None when its folder
    does not say (written before partitions kept it, or not a partition's folder)."""
    import json

    try:
        value = json.loads(paths.splits_planned.read_text())
    except (OSError, ValueError):
        return None
    splits = value.get("splits") if isinstance(value, dict) else None
    return [str(split) for split in splits] if isinstance(splits, list) else None


def note_split(paths: RunPaths, digest: str) -> None:
    """Add ``digest`` to the splits the partition's store is planned from, before it is planned;
    a store that exists without the list gets "unknown" first (it may hold any row)."""
    import json

    from relaybatch.files import write_text_atomically

    known = splits_planned(paths)
    if known is None:
        known = ["unknown"] if paths.checkpoint.exists() else []
    if digest not in known:
        paths.root.mkdir(parents=True, exist_ok=True)
        write_text_atomically(paths.splits_planned, json.dumps({"splits": [*known, digest]}))


def stores_to_consult(run: RunPaths, paths: RunPaths, digest: str) -> list[RunPaths]:
    """The run's other store folders that may hold rows of partition ``paths``' range: every one
    but the stores of this split's other partitions that were only ever planned from it (their
    ranges and ours are disjoint, so their rows cannot be ours: not even their handoff is read).
    The others are read from their handoff files (``OtherStores``), never their SQLite."""
    found = []
    for folder in run.store_folders():
        if folder.root == paths.root or not folder.checkpoint.exists():
            continue
        if partition_of_folder(folder.root.name) is not None and splits_planned(folder) == [digest]:
            continue
        found.append(folder)
    return found
