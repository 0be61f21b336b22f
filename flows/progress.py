"""A progress artifact that follows a running execute step, updated every few seconds.

Reading the counts is one SQL query on the checkpoint store (its own connection; WAL lets it read
while the engine writes). Per-item updates would be one API call per item: measured Prefect
overhead makes that a bottleneck, so the artifact moves on a timer instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact
from relaybatch.flows.spend import spend_lines, total_spend

from relaybatch.engine import TERMINAL_STATES

DEFAULT_EVERY_SECONDS = 5.0

log = logging.getLogger(__name__)


def progress_of(counts: dict[str, int], spent: Decimal) -> tuple[float, str]:
    """Percent of items in a terminal state, and one line with every state and the spend so far."""
    total = sum(counts.values())
    finished = sum(count for state, count in counts.items() if state in TERMINAL_STATES)
    percent = 100.0 * finished / total if total else 100.0
    states = ", ".join(f"{state} {count}" for state, count in sorted(counts.items()))
    return percent, f"{finished} of {total} items finished ({states or 'no items'}); spent {spent} USD"


def read_progress(checkpoint: Path) -> tuple[float, str]:
    # Read-only connection: the follower must never take a write lock beside the engine.
    connection = sqlite3.connect(f"{checkpoint.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = connection.execute("select state, count(*) from items group by state").fetchall()
    finally:
        connection.close()
    counts = {state: count for state, count in rows}
    return progress_of(counts, total_spend(spend_lines(checkpoint)))


async def _follow(artifact_id: UUID, checkpoint: Path, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        percent, description = read_progress(checkpoint)
        try:
            await aupdate_progress_artifact(artifact_id, percent, description=description)
        except Exception as exc:  # the UI missing one update must never stop a paid run
            log.warning("progress artifact not updated: %s", type(exc).__name__)


@contextlib.asynccontextmanager
async def progress_artifact(checkpoint: Path, every: float = DEFAULT_EVERY_SECONDS) -> AsyncIterator[None]:
    """Show the run's progress in the Prefect UI while the body runs; a final update on exit."""
    percent, description = read_progress(checkpoint)
    artifact_id = await acreate_progress_artifact(percent, description=description)
    follower = asyncio.create_task(_follow(artifact_id, checkpoint, every))
    try:
        yield
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        percent, description = read_progress(checkpoint)
        # Shielded: on cancellation the last state of the run still reaches the UI.
        with contextlib.suppress(Exception):
            await asyncio.shield(aupdate_progress_artifact(artifact_id, percent, description=description))
