"""A store folder's progress file as readers see it (``progress.json``, written by the store's owner:
relaybatch/run/progress_file.py): its counts, spend, settings and last execution. It sits below
the costs and the run layers, which both read it for folders whose stores they must not open
(DESIGN.md invariant 11: never another host's SQLite)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relaybatch.run_folder import RunPaths

FORMAT = 1
SUPERSEDED = "superseded"  # engine/states.py's, not counted in a folder's total


@dataclass(frozen=True)
class FolderProgress:
    """A store folder's figures as its owner last wrote them."""

    counts: dict[str, int]  # items per state (superseded ones apart)
    known_usd: Decimal
    unknown_usd: Decimal  # worst case held for calls of unknown outcome or price
    reserved_usd: Decimal  # calls in flight, at their worst case
    written_at: str
    host: str
    pid: int
    live: bool  # written during an execution (from its snapshots), not from the stores
    execution: dict[str, Any] = field(default_factory=dict)  # started_at, ended_at, stop_reason
    stopped: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # the store's stored settings
    # Written during an execution: the most its own spend can reach in it under the run budget it
    # enforces, and under each job's (None, {}: no such budget, or not written during one).
    ceiling_usd: Decimal | None = None
    job_ceilings_usd: dict[str, Decimal] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(count for state, count in self.counts.items() if state != SUPERSEDED)

    @property
    def spent_usd(self) -> Decimal:
        """What the store's budgets count: known, unknown at its worst case, in flight."""
        return self.known_usd + self.unknown_usd + self.reserved_usd


def read_progress(paths: RunPaths) -> FolderProgress | None:
    try:
        value = json.loads(paths.progress.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        return None
    return FolderProgress(
        {str(state): int(count) for state, count in (value.get("counts") or {}).items()},
        Decimal(value.get("known_usd") or "0"),
        Decimal(value.get("unknown_usd") or "0"),
        Decimal(value.get("reserved_usd") or "0"),
        str(value.get("written_at") or ""),
        str(value.get("host") or ""),
        int(value.get("pid") or 0),
        bool(value.get("live")),
        dict(value.get("execution") or {}),
        value.get("stopped"),
        dict(value.get("settings") or {}),
        None if value.get("ceiling_usd") is None else Decimal(value["ceiling_usd"]),
        {str(job): Decimal(usd) for job, usd in (value.get("job_ceilings_usd") or {}).items()},
    )
