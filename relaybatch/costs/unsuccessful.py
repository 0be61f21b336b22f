"""Money spent on items that did not succeed: failed, uncertain and cancelled items, grouped by state
and reason (``error_label``: a status and type, or the reason's first words), with what their calls
cost as the budget counts it (known, or the worst case where unknown). A video billed at creation
whose render failed, a re-asked answer that never fit its schema, a call interrupted before its
answer: the report says how much of the spend bought nothing, and why.

Read beside a running execution like the rest of the report: the checkpoint gives the items and
their reasons (through its state index), the cost store what each of those items' calls cost; a
shard's or partition's folder gives them in the files its owner writes (``handoff.parquet``,
``ledger.parquet``), never in its SQLite (DESIGN.md invariant 11).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from relaybatch.costs.ledger import CostStore, budget_amount, read_ledger
from relaybatch.costs.report import error_label, opens_stores, run_folders, store_folders
from relaybatch.engine.states import CANCELLED, FAILED, UNCERTAIN
from relaybatch.run_folder import CHECKPOINT_NAME, COST_STORE_NAME, HANDOFF_NAME, LEDGER_NAME

UNSUCCESSFUL = (FAILED, UNCERTAIN, CANCELLED)  # as CheckpointStore.unsuccessful_items reads them


@dataclass(frozen=True)
class UnsuccessfulSpend:
    run: str
    state: str  # failed, uncertain or cancelled
    reason: str  # error_label of the items' reasons
    items: int
    calls: int
    usd: Decimal


def unsuccessful_spend(runs_dir: Path, names: Sequence[str]) -> list[UnsuccessfulSpend]:
    """Per run, state and reason: the items that did not succeed and what their calls cost, the
    costliest first."""
    groups: dict[tuple[str, str, str], tuple[int, int, Decimal]] = {}
    for folder in run_folders(runs_dir, names):
        for store_folder in store_folders(folder):
            for (state, reason), (items, calls, usd) in _of_store(store_folder).items():
                before = groups.get((folder.name, state, reason), (0, 0, Decimal(0)))
                groups[(folder.name, state, reason)] = (before[0] + items, before[1] + calls, before[2] + usd)
    lines = [
        UnsuccessfulSpend(run, state, reason, *totals) for (run, state, reason), totals in groups.items()
    ]
    return sorted(lines, key=lambda line: (-line.usd, line.run, line.state, line.reason))


def _of_owner_files(folder: Path) -> dict[tuple[str, str], tuple[int, int, Decimal]]:
    """``_of_store`` of a shard's or partition's folder, from the files its owner writes (never its
    SQLite, perhaps another host's): its items that did not succeed from ``handoff.parquet``, their
    calls from ``ledger.parquet``, each as of its last execution's end."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    handoff = folder / HANDOFF_NAME
    if not handoff.is_file():
        return {}
    table = pq.read_table(handoff, columns=["key", "state", "last_error"])
    table = table.filter(pc.is_in(table.column("state"), pa.array(list(UNSUCCESSFUL))))
    items = [
        (key, state, reason or "no reason recorded")
        for key, state, reason in zip(*(column.to_pylist() for column in table.columns), strict=True)
    ]
    wanted = {key for key, _, _ in items}
    spend: dict[str, tuple[int, Decimal]] = {}
    for record in read_ledger(folder / LEDGER_NAME, ("item_key", "usd", "known_usd", "reserved_usd")):
        if record["item_key"] in wanted:
            calls, spent = spend.get(record["item_key"], (0, Decimal(0)))
            spend[record["item_key"]] = (calls + 1, spent + budget_amount(record))
    return _grouped(items, spend)


def _of_store(folder: Path) -> dict[tuple[str, str], tuple[int, int, Decimal]]:
    from relaybatch.engine.store import CheckpointStore

    if not opens_stores(folder):
        return _of_owner_files(folder)
    checkpoint = folder / CHECKPOINT_NAME
    if not checkpoint.exists():
        return {}
    try:
        with CheckpointStore.open_read_only(checkpoint) as store:
            items = list(store.unsuccessful_items())
    except sqlite3.Error:
        return {}  # an older or newer checkpoint layout: this part of the report is best effort
    if not items:
        return {}
    costs = CostStore.open_read_only(folder / COST_STORE_NAME)
    try:
        spend = costs.spend_of_items([key for key, _, _ in items]) if costs is not None else {}
    finally:
        if costs is not None:
            costs.close()
    return _grouped(items, spend)


def _grouped(
    items: list[tuple[str, str, str]], spend: dict[str, tuple[int, Decimal]]
) -> dict[tuple[str, str], tuple[int, int, Decimal]]:
    groups: dict[tuple[str, str], tuple[int, int, Decimal]] = {}
    for key, state, reason in items:
        calls, usd = spend.get(key, (0, Decimal(0)))
        group = (state, error_label(reason, state))
        before = groups.get(group, (0, 0, Decimal(0)))
        groups[group] = (before[0] + 1, before[1] + calls, before[2] + usd)
    return groups
