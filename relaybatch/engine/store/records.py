"""What goes into the store and what planning reports: a change of state, a plan's counts and record."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class PlanCounts:
    """What planning the current manifest into the store did."""

    added: int
    superseded: int
    restored: int


class KeptRows(Protocol):
    """Rows (digest, job, line) a duplicate finder kept (relaybatch/manifests/duplicates.py): a file,
    and the query of its rows once attached under a name."""

    @property
    def path(self) -> Path: ...

    def select_sql(self, database: str) -> str: ...


@dataclass(frozen=True)
class PlanRecord:
    """A plan's fingerprint, written in the transaction that plans its items.

    ``complete``: the plan covered the whole manifest (the record replaces the last one, and items
    it no longer produces are superseded); else it added rows appended since (the record grows).
    ``seen``: (PLANNED_KEY or PLANNED_ID, the rows a duplicate finder kept: ``KeptRows``)."""

    summary: dict[str, Any]
    inputs: Iterable[Sequence[Any]]  # (path, role, size, sha256, detail JSON)
    seen: Sequence[tuple[int, KeptRows]] = ()
    complete: bool = True


@dataclass(frozen=True)
class Change:
    """One item moving to ``state``, with the columns that change alongside it."""

    key: str
    state: str
    fields: dict[str, Any] = field(default_factory=dict)
    detail: str | None = None
