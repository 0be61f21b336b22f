"""The execution's feeder: pending items ready to send, paged out of the checkpoint in rowid order
and queued for the workers (runner.py), skipping jobs their budget holds or stops and jobs
waiting for a render slot; between passes it waits for the next retry, a freed slot, or a stop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from relaybatch.engine.states import PENDING
from relaybatch.engine.store import epoch

if TYPE_CHECKING:
    from relaybatch.engine.runner import Execution


async def feed(execution: Execution) -> None:
    """Queue the pending items ready to send for the workers, page by page, until none is left
    (or only renders past their deadline hold what is left, or submissions stop); then one ``None``
    per worker, so each of them ends."""
    while execution.submitting:
        if await _feed_one_pass(execution):
            continue
        idle = execution.in_flight == 0 and execution.queue.empty()
        if idle and not _pending_left(execution):
            break
        if idle and execution.jobs_waiting_slot and execution.poller.only_stuck_left():
            # What is left waits for slots that only stuck renders hold: the run ends.
            execution.stuck_end(execution.poller.stuck)
            break
        await _wait_for_retries(execution)
    # Not in a finally: after a crash the workers are cancelled and nobody would drain these.
    for _ in range(execution.settings.concurrency):
        await execution.queue.put(None)


async def _feed_one_pass(execution: Execution) -> bool:
    """Queue every pending item that is ready now; True if any was queued."""
    cursor, queued_any = 0, False
    while execution.submitting:
        # Skipped in SQL: never read again and again.
        held = [*execution.jobs_stopped, *execution.jobs_waiting, *execution.jobs_waiting_slot]
        page = execution.store.work_page(
            PENDING, cursor, execution.settings.page_size, ready_at=epoch(), skip_jobs=held
        )
        if not page:
            return queued_any
        cursor = page[-1].rowid
        # Decide which rows to queue now, before any await: a row already queued when the page
        # was read may be sent, answered and released while this loop waits on a full queue,
        # and queueing its stale copy then would send it again (a submitted video, twice).
        fresh = [row for row in page if row.key not in execution.queued and not execution.job_held(row.job)]
        execution.queued.update(row.key for row in fresh)
        for row in fresh:
            queued_any = True
            await execution.queue.put(row)
    return queued_any


def _pending_left(execution: Execution) -> bool:
    return execution.store.has_state(PENDING, skip_jobs=list(execution.jobs_stopped))


async def _wait_for_retries(execution: Execution) -> None:
    """Until the next retry is due (at most 1 s), a render slot frees, or the run stops."""
    earliest = execution.store.earliest_not_before()
    delay = 0.05 if earliest is None else min(max(0.0, earliest - epoch()), 1.0)
    execution.slot_freed.clear()
    waits = {asyncio.ensure_future(execution.stop.wait()), asyncio.ensure_future(execution.slot_freed.wait())}
    try:
        await asyncio.wait(waits, timeout=max(delay, 0.005), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
