"""A progress artifact that follows a running execute step, updated every few seconds.

Reading the counts is a read-only view of the checkpoint store (relaybatch.run.views; WAL lets it
read while the engine writes). Per-item updates would be one API call per item: measured Prefect
overhead makes that a bottleneck, so the artifact moves on a timer instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

from prefect.artifacts import acreate_progress_artifact, aupdate_progress_artifact

from relaybatch.run import read_progress

DEFAULT_EVERY_SECONDS = 5.0

log = logging.getLogger(__name__)


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
