"""Handoff files: what a store's owner leaves beside it for the run's other stores (DESIGN.md
invariant 11, docs/prefect.md "The storage contract").

A checkpoint store (SQLite, WAL) is opened by one host at a time: the one holding its folder's
``execution.lock`` (run/locking.py). Another store of the run that may hold the same items (a
partition planned from a new split after an edit, a shard, a partition after a merge into the
run's store) must still learn what this one settled or superseded, so as never to send it again
and to bring a superseded item back done. It learns it from two files the owner writes into the
store's folder, never from the store:

    handoff.parquet   every row settled here (done, in flight, uncertain) or superseded here,
                      every column of the item (engine/store/schema.py HANDOFF_COLUMNS)
    events.parquet    a shard's or partition's events (its activity, for reports and the dashboard)
    handoff.json      the run's name, settings and manifest (path, identity), the state counts,
                      the parquet file's stamp, and the store's stamp when both were written

The owner writes them (temporary name, then rename: the parquet first, the JSON last) when it lets
go of the store: at the end of an execution or a plan (``executing``), or of a merge.
A reader trusts them only while the store's stamp (``store_stamp``: size and modification time of
``checkpoint.sqlite``, and of its ``-wal`` file when that holds anything) is the one the JSON
records: any write since (an execution still going, or killed before it could write them) changes
it. Then the reader takes the folder's lock for a moment (``fresh_handoff``), which makes its host
the store's one host, and writes them itself; while another process holds the lock it is refused
with who that is (the store's files are written when that execution ends).

A reader turns a handoff into a scratch store on its own host (``scratch_store``), which the folds
(``CheckpointStore.absorb``) read as they read a store: nothing of the fold's rules is repeated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relaybatch.engine import CheckpointStore
from relaybatch.engine.store import HANDOFF_COLUMNS
from relaybatch.files import replaced_atomically
from relaybatch.run.locking import holding, what_runs_in
from relaybatch.run_folder import EVENT_COLUMNS, RunPaths

# Rows read from the store per page and written per Parquet row group (a row holds its answer:
# a few KB at most for chat, so a page is a few MB).
PAGE_ROWS = 5_000
FORMAT = 1

REFRESH_ADVICE = (
    "This command reads another store of the run only through the files its owner writes beside it "
    "(handoff.parquet, handoff.json) when its execution ends: run this command again once it has ended."
)


@dataclass(frozen=True)
class Handoff:
    """A store's handoff as its JSON says: the run, its manifest, the state counts, and where."""

    paths: RunPaths
    run_name: str | None
    settings: dict[str, Any]
    manifest: tuple[str, str] | None  # (path, identity) the store recorded
    counts: dict[str, int]
    rows: int  # rows in the parquet file


def store_stamp(paths: RunPaths) -> list[int] | None:
    """The store's size and modification time (ns), and its WAL's when that holds anything (a
    reader may leave an empty one); None when there is no store. Any write changes it."""
    try:
        main = paths.checkpoint.stat()
    except FileNotFoundError:
        return None
    try:
        wal = Path(f"{paths.checkpoint}-wal").stat()
        wal_stamp = [wal.st_size, wal.st_mtime_ns] if wal.st_size else [0, 0]
    except FileNotFoundError:
        wal_stamp = [0, 0]
    return [main.st_size, main.st_mtime_ns, *wal_stamp]


def _file_stamp(path: Path) -> list[int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def _recorded(paths: RunPaths) -> dict[str, Any] | None:
    try:
        value = json.loads(paths.handoff_record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("format") == FORMAT else None


def _handoff(paths: RunPaths, record: dict[str, Any]) -> Handoff:
    manifest = record.get("manifest")
    return Handoff(
        paths,
        record.get("run_name"),
        dict(record.get("settings") or {}),
        (str(manifest[0]), str(manifest[1])) if manifest else None,
        {str(state): int(count) for state, count in (record.get("counts") or {}).items()},
        int(record.get("rows") or 0),
    )


def current_handoff(paths: RunPaths) -> Handoff | None:
    """The store's handoff when it says what the store holds now (the stamps match); else None."""
    record = _recorded(paths)
    if record is None or record.get("store") != store_stamp(paths):
        return None
    if record.get("parquet") != _file_stamp(paths.handoff):
        return None
    return _handoff(paths, record)


def last_handoff(paths: RunPaths) -> Handoff | None:
    """The store's last handoff, current or not (what was true when its owner last let go)."""
    record = _recorded(paths)
    return _handoff(paths, record) if record is not None else None


def write_handoff(paths: RunPaths) -> Handoff:
    """Write the store's handoff files. The caller owns the store: it holds the folder's lock."""
    with CheckpointStore(paths.checkpoint) as store:
        record: dict[str, Any] = {
            "format": FORMAT,
            "run_name": store.run_name(),
            "settings": store.run_settings(),
            "manifest": list(manifest) if (manifest := store.manifest()) else None,
            "counts": store.count_by_state(),
        }
        with replaced_atomically(paths.handoff) as temporary:
            rows = _write_rows(store, temporary)
        if paths.root != paths.run_root:  # a shard's or partition's: reports read its events here
            with replaced_atomically(paths.events) as temporary:
                _write_events(store, temporary)
    # After the store is closed: its stamp as it stays until the next write.
    record.update(rows=rows, store=store_stamp(paths), parquet=_file_stamp(paths.handoff))
    with replaced_atomically(paths.handoff_record) as temporary:
        temporary.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    return _handoff(paths, record)


def _write_events(store: CheckpointStore, path: Path) -> None:
    """The store's events (``CheckpointStore.iter_events``: key, state, detail, time, kind) as
    Parquet at ``path``, for the activity a report and the dashboard show (costs/report.py
    ``read_events``), a page per row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.string()) for name in EVENT_COLUMNS])
    with pq.ParquetWriter(path, schema) as writer:
        page: list[dict[str, Any]] = []
        for event in store.iter_events():
            page.append(event)
            if len(page) >= PAGE_ROWS * 4:
                writer.write_table(pa.Table.from_pylist(page, schema=schema))
                page = []
        writer.write_table(pa.Table.from_pylist(page, schema=schema))


def _write_rows(store: CheckpointStore, path: Path) -> int:
    """The store's rows with work as Parquet at ``path``, a page per row group; rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema, rows, after = _schema(), 0, 0
    with pq.ParquetWriter(path, schema) as writer:
        while page := store.handoff_page(after, PAGE_ROWS):
            after = page[-1][0]
            columns = [list(column) for column in zip(*(row[1:] for row in page), strict=True)]
            writer.write_table(pa.table(columns, schema=schema))
            rows += len(page)
    return rows


def leave_handoff(paths: RunPaths) -> None:
    """The owner letting go of its store: its handoff written unless it is current already.
    Every store's, a run executed whole too: partitions planned later, on another host, read it
    (about 10 us of CPU per settled row, a hundredth of what the row's execution costs)."""
    from relaybatch.run.progress_file import write_exact

    if paths.checkpoint.exists() and current_handoff(paths) is None:
        write_exact(paths)  # the folder's figures as it leaves them (run/progress_file.py)
        write_handoff(paths)


def fresh_handoff(paths: RunPaths) -> Handoff:
    """The store's current handoff: as its owner left it, or, when the store changed since (an
    execution killed before it wrote it, a store from before handoffs), written now under the
    folder's lock for a moment. RunBusy (naming the holder) when a process holds the lock."""
    found = current_handoff(paths)
    if found is not None:
        return found
    activity = f"writing the handoff files of {what_runs_in(paths)}"
    with holding(paths.root, activity, REFRESH_ADVICE, momentary=True):
        return current_handoff(paths) or write_handoff(paths)


def fresh_spend_files(paths: RunPaths, unrecorded: bool = False) -> None:
    """Before an execution of the store at ``paths`` whose budget counts the run's other stores
    (costs/run_budgets.py ``folder_spent``), or `relaybatch resolve` listing their calls: each other
    store whose execution was killed before it let go (its progress file still written by that
    execution, its lock free) gets its ``ledger.parquet`` and ``progress.json`` written exactly from
    its stores, under its lock for a moment (which makes this host its one host, as for
    ``fresh_handoff``), so it counts what it spent rather than the ceiling that execution wrote,
    and lists the calls it left in flight. A store whose lock is held (an execution going on, on
    any host) is left as it is: its ceiling stands. With ``unrecorded``, a cost store with no
    progress file beside it (kept by a version before progress files) gets its ledger written too
    (a ledger already current is kept: ``write_ledger``)."""
    from relaybatch.costs import CostStore, write_ledger
    from relaybatch.folder_lock import lock_holder
    from relaybatch.folder_progress import read_progress
    from relaybatch.run.locking import RunBusy
    from relaybatch.run.progress_file import write_exact

    def stale(folder: RunPaths) -> bool:
        progress = read_progress(folder)
        if progress is None:
            return unrecorded and folder.cost_store.exists()
        return progress.live and folder.checkpoint.exists()

    for folder in RunPaths(paths.run_root).store_folders():
        if folder.root == paths.root or not stale(folder) or lock_holder(folder.lock) is not None:
            continue
        activity = f"writing the spend files of {what_runs_in(folder)}"
        with contextlib.suppress(RunBusy), holding(folder.root, activity, REFRESH_ADVICE, momentary=True):
            if stale(folder):  # not let go since (its owner may have run again meanwhile)
                if folder.cost_store.exists():
                    costs = CostStore(folder.cost_store)
                    try:
                        write_ledger(costs, folder.ledger)
                    finally:
                        costs.close()
                if read_progress(folder) is not None:
                    write_exact(folder)  # last: a reader finding it exact finds the ledger written


def _schema() -> Any:
    import pyarrow as pa

    types = {
        "attempts": pa.int64(),
        "source_line": pa.int64(),
        "submitted_at": pa.int64(),
        "finished_at": pa.int64(),
        "retryable": pa.int64(),
        "execution": pa.int64(),
        "not_before": pa.float64(),
        "latency_ms": pa.float64(),
        "limiter_wait_ms": pa.float64(),
    }
    return pa.schema([(name, types.get(name, pa.string())) for name in HANDOFF_COLUMNS])


def scratch_store(handoff: Handoff, folder: Path) -> Path:
    """The handoff's rows as a store in ``folder`` (this host's, temporary), with the run's name,
    settings and manifest: what a fold reads in place of the owner's store."""
    import pyarrow.parquet as pq

    # One name per store folder (runs of one folder, shards of one split in two runs differ).
    name = hashlib.sha256(str(handoff.paths.root.resolve()).encode()).hexdigest()[:16]
    path = folder / f"{handoff.paths.name}-{name}.sqlite"
    with CheckpointStore(path) as store:
        if handoff.run_name:
            store.save_run(handoff.run_name, handoff.settings)
            if handoff.manifest:
                store.record_manifest(*handoff.manifest)
        if handoff.rows:
            parquet = pq.ParquetFile(handoff.paths.handoff)
            for batch in parquet.iter_batches(batch_size=PAGE_ROWS):
                store.load_handoff(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    return path


@contextlib.contextmanager
def scratch_stores(folders: list[RunPaths]) -> Iterator[list[Path]]:
    """Scratch stores of ``folders``' current handoffs (``fresh_handoff``), removed afterwards."""
    from relaybatch.files import scratch_folder

    with scratch_folder("relaybatch-handoff-") as folder:
        yield [scratch_store(fresh_handoff(paths), folder) for paths in folders]


def recorded_manifest(paths: RunPaths) -> tuple[str, str] | None:
    """(manifest path, identity) that the store recorded, from its handoff: the last one written
    (a manifest is recorded when planning, and a plan's owner writes the handoff when it lets go),
    else one written now (``fresh_handoff``); None when a process holds a store that has none yet
    (its first plan or execution: it writes one when it lets go)."""
    found = last_handoff(paths)
    if found is None and paths.checkpoint.exists():
        found = handoff_or_none(paths)
    return found.manifest if found else None


def handoff_or_none(paths: RunPaths) -> Handoff | None:
    """``fresh_handoff``, or None while a process holds the folder's lock over a store that changed
    since its handoff (what is optional, like reusing another run's answers, does without it)."""
    from relaybatch.run.locking import RunBusy

    try:
        return fresh_handoff(paths)
    except RunBusy:
        return None
