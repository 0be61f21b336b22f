"""Results while a run goes: an export beside an execution, as a consistent snapshot.

An execution owns its run's ``results/`` and ``ledger.parquet`` and writes them when it ends (an
export racing it for those files could put older rows over newer ones: run/locking.py). An export
asked for meanwhile (`relaybatch export RUN`, or ``relaybatch.Run.results()`` in a notebook) writes
the same files under ``<run>/snapshot/`` instead. It first copies each store with SQLite's online
backup from a read-only connection (one short read: every row as it was at one moment, an item done
then with its answer, one in flight as it stood), then exports from the copies. Exporting straight
from the live store in one read transaction held that transaction for the whole export (40 s for
20,000 items on a loaded machine), which kept the execution's WAL from being checkpointed and cost
it an eighth more CPU per item (benchmarks/RESULTS.md, issue 31). A snapshot whose store has not
changed since the last one is kept as it is (export_marks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from relaybatch.engine import CheckpointStore, export_results
from relaybatch.files import scratch_folder
from relaybatch.run_folder import CHECKPOINT_NAME, COST_STORE_NAME, RunPaths


@dataclass(frozen=True)
class Snapshot:
    """An export beside an execution: the files and the item counts they hold."""

    results: list[Path]
    ledger: Path | None
    counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        done, total = self.counts.get("done", 0), sum(self.counts.values()) - self.counts.get("superseded", 0)
        return f"snapshot of the executing run: {done:,} of {total:,} items done so far"


def export_snapshot(paths: RunPaths) -> Snapshot:
    """The results Parquet files (one per job, every current item as it stands) and the cost ledger
    of the store at ``paths``, written under ``paths.snapshot`` from a copy of each store taken in
    one short read (``copy_to``): the export then reads the copies, and the execution's writes are
    held up for the copy only, not for the whole export."""
    from relaybatch.costs import CostStore, write_ledger

    target = paths.snapshot
    with scratch_folder("relaybatch-snapshot-") as scratch:
        with CheckpointStore.open_read_only(paths.checkpoint) as live:
            live.copy_to(scratch / CHECKPOINT_NAME)
        costs = CostStore.open_read_only(paths.cost_store)
        if costs is not None:
            try:
                costs.copy_to(scratch / COST_STORE_NAME)
            finally:
                costs.close()
        with CheckpointStore.open_read_only(scratch / CHECKPOINT_NAME) as store:
            counts = store.count_by_state()
            results = export_results(store, target.results)
        copied = CostStore.open_read_only(scratch / COST_STORE_NAME)
        if copied is None:  # nothing charged yet
            return Snapshot(results, None, counts)
        try:
            ledger = write_ledger(copied, target.ledger)
        finally:
            copied.close()
    return Snapshot(results, ledger, counts)


def exports_now(paths: RunPaths) -> tuple[list[Path], Path | None]:
    """The run's results files and its ledger as its stores hold them now. Nothing executes it: its
    own files (written again only when behind the stores, export_marks.py). An execution holds it
    (another process's, or this one's: the API reading results while its run goes): a snapshot."""
    from relaybatch.costs import CostStore, write_ledger
    from relaybatch.run.execution import export_run_results
    from relaybatch.run.locking import RunBusy, exporting, holder_of

    if holder_of(paths.root) is None:
        try:
            with exporting(paths):
                results = export_run_results(paths)
                if not paths.cost_store.exists():
                    return results, None
                costs = CostStore(paths.cost_store)
                try:
                    return results, write_ledger(costs, paths.ledger)
                finally:
                    costs.close()
        except RunBusy:  # an execution started meanwhile
            pass
    snapshot = export_snapshot(paths)
    return snapshot.results, snapshot.ledger
