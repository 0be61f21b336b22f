"""Money spent on items that did not succeed: failed, uncertain and cancelled items, grouped by state
and reason (``error_label``: a status and type, or the reason's first words), with what their calls
cost as the budget counts it (known, or the worst case where unknown). A video billed at creation
whose render failed, a re-asked answer that never fit its schema, a call interrupted before its
answer: the report says how much of the spend bought nothing, and why.

Read beside a running execution like the rest of the report: the checkpoint gives the items and
their reasons (through its state index), the cost store what each of those items' calls cost.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from relaybatch.costs.ledger import CostStore
from relaybatch.costs.report import error_label, run_folders, store_folders
from relaybatch.run_folder import CHECKPOINT_NAME, COST_STORE_NAME


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


def _of_store(folder: Path) -> dict[tuple[str, str], tuple[int, int, Decimal]]:
    from relaybatch.engine.store import CheckpointStore

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
    groups: dict[tuple[str, str], tuple[int, int, Decimal]] = {}
    for key, state, reason in items:
        calls, usd = spend.get(key, (0, Decimal(0)))
        group = (state, error_label(reason, state))
        before = groups.get(group, (0, 0, Decimal(0)))
        groups[group] = (before[0] + 1, before[1] + calls, before[2] + usd)
    return groups
