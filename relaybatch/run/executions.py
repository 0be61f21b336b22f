"""What one execution of a run did and spent (DESIGN.md invariant 10), read-only.

An execution is a CLI run, a flow run or a scheduled night: the run's checkpoint store keeps a row
for each (``executions``: id, entry, start and end, the items its plan added, the requests it
sent, why it stopped), every item carries the id of the execution that last changed it, and every
ledger row the id of the execution that sent the call. ``execution_figures`` puts the three
together: what `relaybatch status`, `relaybatch report`, the serve line and the Prefect summary show
beside the run's totals. A shard's executions are in the shard's own store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.engine.states import DONE, FAILED
from relaybatch.engine.store import CheckpointStore
from relaybatch.errors import UserError

__all__ = ["ExecutionFigures", "execution_figures", "execution_lines", "execution_usd"]


def execution_usd(value: Decimal) -> str:
    """Exact USD as plain text: every digit the ledger has, never an exponent (zero as 0.00000000,
    not 0E-8)."""
    return f"{value:f}"


@dataclass(frozen=True)
class ExecutionFigures:
    """One execution: when and how it ran, what it added, sent and finished, what it spent."""

    id: int
    entry: str
    label: str | None
    started_at: str
    ended_at: str | None
    stop_reason: str | None
    added: int
    sent: int | None
    counts: dict[str, int] = field(default_factory=dict)  # items per state it last changed
    known_usd: Decimal = Decimal(0)
    unknown_usd: Decimal = Decimal(0)  # worst case of calls it sent with no answer or price known

    @property
    def total_usd(self) -> Decimal:
        return self.known_usd + self.unknown_usd

    @property
    def figures(self) -> str:
        """new, sent, done, failed (and any other state it left items in), spent."""
        others = [
            f"{state} {count}" for state, count in sorted(self.counts.items()) if state not in (DONE, FAILED)
        ]
        parts = [
            f"new {self.added}",
            f"sent {'?' if self.sent is None else self.sent}",
            f"done {self.counts.get(DONE, 0)}",
            f"failed {self.counts.get(FAILED, 0)}",
            *others,
            f"spent {execution_usd(self.total_usd)} USD",
        ]
        if self.unknown_usd:
            parts[-1] += f" (of which {execution_usd(self.unknown_usd)} unknown, worst case)"
        return ", ".join(parts)

    @property
    def heading(self) -> str:
        """``execution 3 (schedule, flow run nimble-fox)``."""
        where = self.entry + (f" {self.label}" if self.label and self.entry != "cli" else "")
        return f"execution {self.id} ({where})"

    @property
    def ending(self) -> str:
        if self.ended_at is None:
            return f"started {self.started_at}, no end recorded"
        stopped = f", stopped early: {self.stop_reason}" if self.stop_reason else ""
        return f"{self.started_at} to {self.ended_at}{stopped}"

    def line(self) -> str:
        return f"{self.heading}: {self.figures}"

    def row(self) -> dict[str, Any]:
        """A table's row (report, artifact): exact decimals as text."""
        return {
            "execution": self.id,
            "entry": self.entry,
            "label": self.label or "",
            "started_at": self.started_at,
            "ended_at": self.ended_at or "",
            "new": self.added,
            "sent": self.sent,
            "done": self.counts.get(DONE, 0),
            "failed": self.counts.get(FAILED, 0),
            "known_usd": str(self.known_usd),
            "unknown_usd": str(self.unknown_usd),
            "total_usd": str(self.total_usd),
            "stop_reason": self.stop_reason or "",
        }


def execution_figures(
    run_dir: Path, execution: int | None = None, *, label: str | None = None
) -> ExecutionFigures | None:
    """The figures of execution ``execution`` of the run (store folder) at ``run_dir``; with none
    given, of the newest one started under ``label`` (a flow run's name), or the newest of all.
    None when the run has no such execution yet; an id it does not have is a located error."""
    from relaybatch.costs import CostStore
    from relaybatch.costs.report import COST_STORE_NAME

    with CheckpointStore.open_read_only(run_dir / "checkpoint.sqlite") as store:
        if execution is not None:
            record = store.execution_record(execution)
            if record is None:
                newest_ids = [str(row["id"]) for row in store.executions(limit=5)]
                hint = f" (newest: {', '.join(newest_ids)})" if newest_ids else " (it has none yet)"
                raise UserError(f"{run_dir}: no execution {execution} in this run{hint}")
        elif label is not None:
            record = store.execution_by_label(label)
        else:
            newest = store.executions(limit=1)
            record = newest[0] if newest else None
        if record is None:
            return None
        counts = store.count_by_state_for_execution(record["id"])
    known = unknown = Decimal(0)
    costs = CostStore.open_read_only(run_dir / COST_STORE_NAME)
    if costs is not None:
        try:
            known, unknown = costs.execution_spend(record["id"])
        finally:
            costs.close()
    return ExecutionFigures(
        id=record["id"],
        entry=record["entry"] or "api",
        label=record["label"],
        started_at=record["started_at"],
        ended_at=record["ended_at"],
        stop_reason=record["stop_reason"],
        added=record["added"] or 0,
        sent=record["sent"],
        counts=counts,
        known_usd=known,
        unknown_usd=unknown,
    )


def execution_lines(runs_dir: Path, names: list[str], execution: int | None = None) -> list[str]:
    """For `relaybatch report`: each run's last execution (or execution ``execution`` of the one
    run named) as one line."""
    from relaybatch.costs.report import run_folders

    lines = []
    from relaybatch.folder_lock import executed_elsewhere

    for folder in run_folders(runs_dir, names):
        if not (folder / "checkpoint.sqlite").exists():
            continue
        if (holder := executed_elsewhere(folder)) is not None:  # its store is that host's now
            lines.append(
                f"{folder.name}: {holder.describe()}: its executions are shown there, or here after it"
            )
            continue
        figures = execution_figures(folder, execution)
        if figures is not None:
            which = "execution" if execution is not None else "last execution"
            lines.append(f"{folder.name}: {which}: {figures.line()}; {figures.ending}")
    return lines
