"""What a billed create that ended in a gateway error leaves behind: the engine's half of the
verdicts in outcomes.py (charged and ended, back to pending, retried after a back-off, waiting for
a render slot, or failed), written through the execution's group commit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from relaybatch.engine.kinds import CALLS
from relaybatch.engine.outcomes import STOP_BILLING_MESSAGE, STOP_RUN_MESSAGE, Verdict, verdict_for
from relaybatch.engine.render_slots import is_concurrency_refusal, named_cap
from relaybatch.engine.states import FAILED, PENDING, RETRY_SEND, UNCERTAIN
from relaybatch.engine.store import Change, Row, epoch
from relaybatch.gateway import APIStatusError, GatewayError, UnexpectedResponse
from relaybatch.gateway.retry import retry_delay

if TYPE_CHECKING:
    from relaybatch.engine.runner import Execution
    from relaybatch.engine.spend import BilledCall


async def record_error(
    execution: Execution, row: Row, call: BilledCall, attempt: int, error: GatewayError
) -> None:
    """A billed create that ended in an error, recorded by its verdict (outcomes.py): uncertain or
    unreadable ones charged at their worst case and ended; a render refused for concurrency back to
    wait for a slot; a stop back to pending; a retryable one back to pending after its back-off,
    until the attempt budget is spent; the rest failed."""
    verdict = verdict_for(error)
    reason = str(error)
    if verdict is Verdict.UNCERTAIN or isinstance(error, UnexpectedResponse):
        # Uncertain: maybe billed. An unexpected response was answered with success, so billed,
        # but is unreadable: charged and failed, never resent.
        state = UNCERTAIN if verdict is Verdict.UNCERTAIN else FAILED
        cost = execution.settle(call, None)
        await execution.writer.write(Change(row.key, state, {"last_error": reason, "cost_usd": cost}, reason))
        execution.count_finished(row.kind, state)
        return
    execution.release(call)
    if await _waits_for_a_slot(execution, row, error, reason):
        return
    if verdict is Verdict.STOP_BILLING or verdict is Verdict.STOP_RUN:
        # Not processed, not billed: back to pending.
        if verdict is Verdict.STOP_BILLING:
            execution.stop_billing(STOP_BILLING_MESSAGE)
        else:
            execution.run_stopped = execution.run_stopped or STOP_RUN_MESSAGE
            execution.stop.set()
        # The request was sent, so it counts in `attempts`; it is not one of this execution's tries.
        await execution.writer.write(Change(row.key, PENDING, {"last_error": reason}, reason))
        return
    await _retried_or_failed(execution, row, verdict, error, reason)


async def _retried_or_failed(
    execution: Execution, row: Row, verdict: Verdict, error: GatewayError, reason: str
) -> None:
    """Back to pending after its back-off while the attempt budget lasts (a retryable error), else
    failed (retryable once the cause is fixed, when it was)."""
    # `attempts` counts every request sent for the item, across executions; the attempt budget
    # (max_attempts) is per execution, counted here for the items that needed a retry.
    tries = execution.tries[row.key] = execution.tries.get(row.key, 0) + 1
    if verdict is Verdict.RETRY and tries < execution.retry.max_attempts:
        headers = error.headers if isinstance(error, APIStatusError) else {}
        delay = retry_delay(tries, execution.retry, headers, execution.rng.random())
        fields = {"last_error": reason, "not_before": epoch() + delay}
        await execution.writer.write(Change(row.key, PENDING, fields, reason))
        execution.retries += 1
        return
    retryable = verdict is Verdict.RETRY
    if retryable:
        reason = f"gave up after {tries} attempts: {reason}"
    fields = {"last_error": reason, "retryable": RETRY_SEND if retryable else None}
    await execution.writer.write(Change(row.key, FAILED, fields, reason))
    execution.count_finished(row.kind, FAILED)


async def _waits_for_a_slot(execution: Execution, row: Row, error: GatewayError, reason: str) -> bool:
    """A render's create refused for concurrency (render_slots.py) while this run has renders
    of the model in flight: learn the cap, and the item goes back to wait for a slot (not a
    blind retry: a slot frees only when a render ends). True when that is what happened."""
    if not (isinstance(error, APIStatusError) and CALLS[row.kind].is_async and is_concurrency_refusal(error)):
        return False
    model = str(row.request.get("model") or "")
    others = execution.slots.in_flight(model) - 1  # this create still holds its own slot here
    if others <= 0:
        return False  # nothing of ours will free a slot: retried with back-off as any 429
    execution.slots.learn(model, named_cap(error) or others)
    execution.concurrency_refusals += 1
    why = f"waits for a render slot: {reason}"
    await execution.writer.write(Change(row.key, PENDING, {"last_error": why}, why))
    execution.jobs_waiting_slot.add(row.job)
    return True
