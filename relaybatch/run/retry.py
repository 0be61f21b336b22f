"""Retrying failed items after a fix (`relaybatch run FILE --retry-failed [REASON...]`).

A failure the engine could not fix by itself (a 403 for an account without access to a model, a
400 for a request the gateway refused) stays ``failed`` across resumes: sending it again would fail
again. Once the user has fixed the cause, this puts those items back to ``pending`` before the
execution, all of them or those whose reason names one of the given texts. Never ``uncertain``
items (they may have been billed: `relaybatch resolve` settles them), and never paid remote work
(a resume polls it). The store makes the move through its checked write path (engine/states.py:
``failed -> pending``), so the exactly-once rules stay those of every other write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from relaybatch.engine import CheckpointStore
from relaybatch.run.locking import executing
from relaybatch.run_folder import RunPaths

RETRY_DETAIL = "put back to pending by --retry-failed"


@dataclass(frozen=True)
class Retried:
    """How many failed items went back to pending, per reason they had failed with."""

    by_reason: dict[str, int] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()  # the texts asked for; empty: every failure

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def lines(self) -> list[str]:
        """What a person is told: how many and why, one line per reason (most items first)."""
        asked = (
            f" whose reason contains {' or '.join(repr(text) for text in self.reasons)}"
            if self.reasons
            else ""
        )
        if not self.total:
            return [
                f"retry: no failed item{asked} (uncertain items are never retried: see `relaybatch resolve`)"
            ]
        head = [f"retry: {self.total} failed item{'s' if self.total != 1 else ''}{asked} back to pending"]
        ordered = sorted(self.by_reason.items(), key=lambda pair: (-pair[1], pair[0]))
        return head + [f"  {count} x {reason}" for reason, count in ordered]


def retry_failed(paths: RunPaths, reasons: Sequence[str] = ()) -> Retried:
    """Failed items of the store at ``paths`` back to pending (all, or those whose reason contains
    one of ``reasons``, case-insensitive); holds the store's lock (re-entrant in this process)."""
    with executing(paths), CheckpointStore(paths.checkpoint) as store:
        return Retried(store.retry_failures(reasons, RETRY_DETAIL), tuple(reasons))
