"""Structured answers in the engine: check each answer, ask again, account what the re-asks cost.

An answer of a structured job (docs/manifests.md, "Structured answers") is checked against the
job's schema (relaybatch.structured). One that fits ends the item ``done`` with the document in its
result (``structured``), which the typed columns read. One that does not is settled as *wasted*
(its ledger row says so: spend that bought nothing) and, while the job's ``max_reasks`` allow, asked
again with the error fed back. Each re-ask is a billed call like any: reserved under the budget and
durable before it goes (the item stays ``sending``, its ``attempts`` counting the re-ask), its own
ledger row (``attempt-N``). An answer still invalid after the last re-ask ends the item ``failed``
with reason ``invalid_output: <error>`` and the raw answer kept in its result (its ``output_text``
or ``tool_calls`` columns). A re-ask refused by the budget, or failing at the gateway, ends the
same way as any call's failure would.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from relaybatch.engine.kinds import Finished
from relaybatch.engine.states import FAILED, SENDING
from relaybatch.engine.store import Change, Row, now_ms
from relaybatch.gateway.sending import SEND_TIMING, SendTiming
from relaybatch.structured import INVALID_OUTPUT, check_answer, reask_request

if TYPE_CHECKING:
    from relaybatch.engine.runner import Execution
    from relaybatch.engine.spend import BilledCall


@dataclass(frozen=True)
class OutputCheck:
    """A structured job's schema and how many times an invalid answer is asked again."""

    schema: dict[str, Any]
    max_reasks: int = 2

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> OutputCheck:
        return cls(dict(saved["schema"]), int(saved.get("max_reasks", 2)))


def _add(total: Decimal | None, cost: Decimal | None) -> Decimal | None:
    return cost if total is None else total if cost is None else total + cost


async def settle_structured(
    engine: Execution,
    row: Row,
    call: BilledCall,
    outcome: Finished,
    latency_ms: float,
    waited_ms: float,
    output: OutputCheck,
) -> None:
    """Check the answer and re-ask until it fits or the re-asks run out; write the item's end."""
    total: Decimal | None = None  # the item's cost: every call made for it, wasted ones included
    request = row.request
    reasks = 0
    while True:
        checked = check_answer(output.schema, row.kind, outcome.result)
        last = checked.valid or reasks >= output.max_reasks
        wasted = not checked.valid
        total = _add(
            total, engine.settle(replace(call, latency_ms=latency_ms, wasted=wasted), outcome.result)
        )
        if checked.valid:
            result = {**outcome.result, "structured": checked.document}
            await engine.finish_done(row, result, latency_ms, waited_ms, total)
            break
        reason = f"{INVALID_OUTPUT}: {checked.error}"
        if last or not engine.submitting:
            await _give_up(engine, row, outcome, reason, total)
            break
        reasks += 1
        request = reask_request(row.kind, request, checked.raw, checked.error or "")
        call = replace(call, request=request, attempt=call.attempt + 1, latency_ms=None, wasted=False)
        if engine.spend is not None and not await engine.admit(engine.spend, call):
            await _give_up(engine, row, outcome, reason + " (the budget refused the re-ask)", total)
            break
        timing = SendTiming()
        SEND_TIMING.set(timing)
        if not await engine.take_token(call):
            await _give_up(engine, row, outcome, reason + " (stopped before the re-ask)", total)
            break
        await engine.writer.write(
            Change(row.key, SENDING, {"attempts": call.attempt}, f"re-ask {reasks}: {reason}")
        )
        engine.sent += 1
        sent = await engine.send(row, call, request, timing)
        if sent is None:
            break  # the failure is recorded (retried later from the first request, or failed)
        answered, latency_ms, waited_ms = sent
        assert isinstance(answered, Finished)  # structured kinds are synchronous
        outcome = answered
    engine.hook("result_committed", row.key)


async def _give_up(
    engine: Execution, row: Row, outcome: Finished, reason: str, total: Decimal | None
) -> None:
    """The item ends failed ``invalid_output``, its last (invalid) answer kept as its result."""
    fields = {"result": outcome.result, "last_error": reason, "cost_usd": total, "finished_at": now_ms()}
    await engine.writer.write(Change(row.key, FAILED, fields, reason))
    engine.count_finished(row.kind, FAILED)
