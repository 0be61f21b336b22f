"""Reuse across runs (``run.reuse`` in the manifest): take another run's done answer to the same
request instead of sending it again.

An item's key is a hash of (job, kind, canonical request), the same in every run, so a pending item
whose key is done in another run asks for an answer already paid for. With ``reuse: all`` (every
run under the runs folder) or ``reuse: [name, ...]``, each such item takes that answer after the
plan and before the execution: ``pending -> done`` (engine/states.py), its result marked with where
it came from (``reused_from``: "<run>:<item id>", a results column), 0 USD in its cost. Only done
answers are taken, never failures or uncertain items: those are the other run's to settle.

The ledger records each reuse at 0 USD (outcome ``reused``) with a reference to the original charge:
its call is ``reused:<run>:<call>``, so its row id ``<key>:reused:<run>:<call>`` names the charge
``<key>:<call>`` in that run's ledger. The ledger row is written before the item's state, so a
crash between the two leaves a pending item that the next plan reuses again, writing the same row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relaybatch.engine import DONE, PENDING, Change, CheckpointStore
from relaybatch.engine.store import Row, now_ms
from relaybatch.files import scratch_folder
from relaybatch.run.handoff import handoff_or_none, scratch_store
from relaybatch.run_folder import CHECKPOINT_NAME, RunPaths

PAGE_ITEMS = 1000  # pending items looked up at a time in each other store


@dataclass(frozen=True)
class Reused:
    """How many pending items took another run's done answer, per run; named runs not found."""

    by_run: dict[str, int] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.by_run.values())

    def lines(self) -> list[str]:
        lines = [f"reuse: no run named {name!r} under the runs folder" for name in self.missing]
        if self.total:
            runs = ", ".join(f"{count} from run '{name}'" for name, count in sorted(self.by_run.items()))
            lines.append(f"reuse: {self.total} done answers taken instead of sending ({runs}), 0 USD each")
        return lines


def reuse_sources(run: RunPaths, reuse: str | Sequence[str]) -> tuple[list[RunPaths], tuple[str, ...]]:
    """The runs to reuse from: every run under the runs folder (``"all"``) or the named ones,
    never this one; and the names of those that do not exist."""
    runs_dir = run.root.parent
    if reuse == "all":
        found = sorted(path.parent for path in runs_dir.glob(f"*/{CHECKPOINT_NAME}"))
        return [RunPaths(folder) for folder in found if folder != run.root], ()
    named = [RunPaths(runs_dir / name) for name in reuse if runs_dir / name != run.root]
    missing = tuple(paths.name for paths in named if not _stores_of(paths))
    return [paths for paths in named if _stores_of(paths)], missing


def _stores_of(run: RunPaths) -> list[Path]:
    """A run's checkpoint stores: its own and its shards'."""
    return run.checkpoints()


def reuse_answers(paths: RunPaths, reuse: str | Sequence[str]) -> Reused:
    """Pending items of the store at ``paths`` take the done answers of the runs ``reuse`` names
    (the caller holds the store's lock: `relaybatch run` and the API reuse right after planning)."""
    sources, missing = reuse_sources(RunPaths(paths.run_root), reuse)
    by_run: dict[str, int] = {}
    with CheckpointStore(paths.checkpoint) as store:
        if not store.has_state(PENDING):
            return Reused({}, missing)
        ledger = _Ledger(paths, store.run_name() or paths.name)
        try:
            with scratch_folder("relaybatch-reuse-") as scratch:
                for source in sources:
                    for checkpoint in _stores_of(source):
                        taken = _take_from(store, RunPaths(checkpoint.parent), source.name, ledger, scratch)
                        if taken:
                            by_run[source.name] = by_run.get(source.name, 0) + taken
        finally:
            ledger.close()
    return Reused(by_run, missing)


def _take_from(
    store: CheckpointStore, folder: RunPaths, run_name: str, ledger: _Ledger, scratch: Path
) -> int:
    """Pending items of ``store`` that the store at ``folder`` has done take its answers: read from
    the handoff and ledger files its owner wrote (run/handoff.py), never its SQLite, perhaps
    another host's (DESIGN.md invariant 11); a store its owner is executing now gives nothing."""
    from relaybatch.costs.ledger import charged_calls_in

    handoff = handoff_or_none(folder)
    if handoff is None:
        return 0
    taken = 0
    theirs = CheckpointStore.open_read_only(scratch_store(handoff, scratch))
    try:
        for page in _pending_pages(store):
            answers = theirs.done_answers([row.key for row in page])
            if not answers:
                continue
            charges = charged_calls_in(folder.ledger, list(answers))
            rows = [row for row in page if row.key in answers]
            ledger.record(rows, answers, charges, run_name)  # before the states (module docstring)
            stamp = now_ms()
            store.apply([_taken(row, answers[row.key], run_name, stamp) for row in rows])
            taken += len(rows)
    finally:
        theirs.close()
    return taken


def _pending_pages(store: CheckpointStore) -> Iterator[list[Row]]:
    after = 0
    while page := store.work_page(PENDING, after, PAGE_ITEMS):
        after = page[-1].rowid
        yield page


def _taken(
    row: Row, answer: tuple[str, dict[str, Any] | None, str | None], run_name: str, stamp: int
) -> Change:
    item_id, result, remote_id = answer
    reused_from = f"{run_name}:{item_id}"
    fields = {
        "result": {**(result or {}), "reused_from": reused_from},
        "remote_id": remote_id,
        "cost_usd": "0",
        "finished_at": stamp,
    }
    return Change(row.key, DONE, fields, f"reused the done answer of run '{run_name}' item {item_id}")


class _Ledger:
    """This run's cost store, opened when the first reuse is recorded."""

    def __init__(self, paths: RunPaths, run_name: str) -> None:
        self.path = paths.cost_store
        self.run_name = run_name
        self.costs: Any = None

    def record(
        self,
        rows: list[Row],
        answers: dict[str, tuple[str, dict[str, Any] | None, str | None]],
        charges: dict[str, dict[str, Any]],
        source: str,
    ) -> None:
        from relaybatch.cost_model import CallCost, UsageCounts
        from relaybatch.costs import CostStore
        from relaybatch.costs.ledger import REUSED, build_row

        if self.costs is None:
            self.costs = CostStore(self.path)
        ledger_rows = []
        for row in rows:
            charge = charges.get(row.key, {})
            _, _, remote_id = answers[row.key]
            ledger_rows.append(
                build_row(
                    run=self.run_name,
                    job=row.job,
                    item_id=row.item_id,
                    item_key=row.key,
                    kind=row.kind,
                    model=charge.get("model") or str(row.request.get("model") or ""),
                    provider=charge.get("provider"),
                    usage=UsageCounts(),
                    cost=CallCost((), "base"),
                    remote_id=charge.get("remote_id") or remote_id,
                    outcome=REUSED,
                    call=f"reused:{source}:{charge.get('call', 'unrecorded')}",
                )
            )
        self.costs.record_many(ledger_rows)

    def close(self) -> None:
        if self.costs is not None:
            self.costs.close()
