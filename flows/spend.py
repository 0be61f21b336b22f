"""Spend so far, by job and model, from the checkpoint store's per-item costs.

The engine writes each priced call's cost (a decimal string) into the item's ``cost_usd``
column as it settles; summing here, with Decimal, keeps the figures exact while a run goes on.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

from relaybatch.flows.summary import SpendLine

from relaybatch.runs import RunPaths

_SPEND_SQL = (
    "select job, coalesce(json_extract(request, '$.model'), kind), cost_usd "
    "from items where cost_usd is not null and cost_usd != ''"
)


def spend_lines(checkpoint: Path) -> list[SpendLine]:
    """Spend per (job, model), largest first; empty when nothing was charged or priced yet."""
    if not checkpoint.exists():
        return []
    # Read-only: this runs beside the engine's writer (WAL allows it) and must never block it.
    connection = sqlite3.connect(f"{checkpoint.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = connection.execute(_SPEND_SQL).fetchall()
    except sqlite3.OperationalError:  # a store from before per-item costs existed
        return []
    finally:
        connection.close()
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for job, model, usd in rows:
        totals[(job, str(model))] += Decimal(usd)
    return sorted(
        (SpendLine(job, model, usd) for (job, model), usd in totals.items()),
        key=lambda line: (-line.usd, line.job, line.model),
    )


def run_spend(paths: RunPaths) -> list[SpendLine]:
    return spend_lines(paths.checkpoint)


def combined_spend(checkpoints: list[Path]) -> list[SpendLine]:
    """Spend of several stores (a run's shards) added up per job and model."""
    totals: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for checkpoint in checkpoints:
        for line in spend_lines(checkpoint):
            totals[(line.job, line.model)] += line.usd
    return sorted(
        (SpendLine(job, model, usd) for (job, model), usd in totals.items()),
        key=lambda line: (-line.usd, line.job, line.model),
    )


def total_spend(lines: list[SpendLine]) -> Decimal:
    return sum((line.usd for line in lines), Decimal(0))
