"""Drive every item of a run to a terminal state, checkpointing each step.

One execution = a feeder paging pending items out of SQLite, a fixed pool of workers sending
billed creates (bounded concurrency: throughput = min(limit, in flight / latency)), and a poller
for async kinds (poller.py). Every request goes through the client's limiter. Every state change
is committed before the engine acts on it (writer.py), so a crash anywhere leaves a store a later
execution resumes from: items left in ``sending`` follow the uncertain policy, submitted work is
polled and never created again, retryable failures are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import replace
from decimal import Decimal
from typing import Any

from relaybatch.engine.collection import fewer_collections
from relaybatch.engine.execution_progress import LimiterEvents, snapshot_of
from relaybatch.engine.execution_settings import (
    REPORT_EVERY_SECONDS,
    STOPPED_BEFORE_SEND,
    USER_STOP_MESSAGE,
    EngineSettings,
    Hook,
    RunSummary,
)
from relaybatch.engine.feeding import feed
from relaybatch.engine.kinds import CALLS, Finished, KindNotAvailable, Submitted
from relaybatch.engine.media import MediaFiles
from relaybatch.engine.poll_plan import RenderSettings
from relaybatch.engine.poller import Poller
from relaybatch.engine.progress import ProgressReporter, Snapshot, kind_totals
from relaybatch.engine.reasks import settle_structured
from relaybatch.engine.render_slots import LocalRenderSlots, RenderSlots
from relaybatch.engine.resume import mark_interrupted_sends, prepare_resume
from relaybatch.engine.send_failures import record_error
from relaybatch.engine.spend import BilledCall, Refused, SharedRoom, SpendGuard
from relaybatch.engine.states import (
    DONE,
    FAILED,
    PENDING,
    POLLING,
    SENDING,
    SUBMITTED,
    TERMINAL_STATES,
)
from relaybatch.engine.stop_waits import StopWaits
from relaybatch.engine.store import Change, CheckpointStore, Row, now_ms
from relaybatch.engine.writer import GroupCommit
from relaybatch.gateway import GatewayClient, GatewayError
from relaybatch.gateway.sending import SEND_TIMING, SendTiming
from relaybatch.limiting import WatchedLimiter


class Execution:
    def __init__(
        self,
        store: CheckpointStore,
        client: GatewayClient,
        settings: EngineSettings,
        *,
        limiter: WatchedLimiter | None = None,
        spend: SpendGuard | None = None,
        stop: asyncio.Event | None = None,
        hook: Hook | None = None,
        progress: ProgressReporter | None = None,
        slots: RenderSlots | None = None,
    ) -> None:
        self.store = store
        self.retry = settings.retry or client.retry_policy
        # One budget: the engine retries an item's sends and polls itself (checkpointed, the worker
        # freed meanwhile), so the client it uses makes exactly one attempt per call.
        self.client = client.with_retry(replace(self.retry, max_attempts=1))
        self.settings = settings
        self.spend = spend
        self.stop = stop or asyncio.Event()
        self.hook = hook or (lambda point, key: None)
        self.progress = progress
        self.writer = GroupCommit(store, before_commit=spend.commit if spend is not None else None)
        self.run_dir = store.path.parent
        self.rng = random.Random()
        self.queue: asyncio.Queue[Row | None] = asyncio.Queue(maxsize=settings.concurrency * 2)
        self.queued: set[str] = set()
        self.sent = 0
        self.in_flight = 0
        self._stops_and_waits()
        self.spent = Decimal(0)
        self.priced = False
        self.finished: dict[str, int] = {}
        self.started = time.monotonic()
        self.poller = Poller(self, settings.poll, limiter, settings.renders)
        self.stuck_stopped: str | None = None
        self._render_slots(settings.renders, slots)
        self.limiter = limiter
        self._figures_at_start(store)

    def _stops_and_waits(self) -> None:
        """Why submissions stopped (the run, billing, a job's budget), and who waits for what."""
        self.billing_stopped: str | None = None
        self.run_stopped: str | None = None
        self.jobs_stopped: dict[str, str] = {}
        # A job its budget refused while calls of it were in flight waits for one to settle (each
        # settles at or below its worst case, so room may come back); then it is fed again.
        self.jobs_waiting: set[str] = set()
        # Set (and replaced) whenever a reservation ends or submissions stop: a worker whose call
        # the run's budget refused only for the calls in flight waits on it, then asks again.
        self.room = asyncio.Event()
        self.waiting_for_room = 0
        # Workers waiting for the limiter's token (their items still pending); a stop ends them.
        self.submit_waits = StopWaits()
        self.waiting_for_token = 0

    def _render_slots(self, renders: RenderSettings, slots: RenderSlots | None) -> None:
        """Caps on renders in flight (per job, per model) and the jobs waiting for a slot."""
        per_job = {job: own.max_in_flight for job, own in renders.jobs.items() if own.max_in_flight}
        self.slots: RenderSlots = slots or LocalRenderSlots(per_job, renders.max_in_flight_per_model)
        # Jobs whose next render waits for a slot (render_slots.py): fed again when one frees.
        self.jobs_waiting_slot: set[str] = set()
        self.slot_freed = asyncio.Event()
        self.concurrency_refusals = 0

    def _figures_at_start(self, store: CheckpointStore) -> None:
        """What the progress figures count from: the open items and kinds at the start, no retries."""
        counts = store.count_by_state()
        self.open_at_start = sum(n for state, n in counts.items() if state not in TERMINAL_STATES)
        self.retries = 0
        self.tries: dict[str, int] = {}  # sends this execution of items that needed a retry
        self.limiter_events = LimiterEvents(store)
        self.kinds_at_start = kind_totals(store)

    # -- orchestration ----------------------------------------------------------------------

    async def run(self) -> None:
        reporter = asyncio.create_task(self._report())
        stopper = asyncio.create_task(self._end_waits_on_stop())
        slots_watch = asyncio.create_task(self._watch_slots())
        try:
            async with asyncio.TaskGroup() as group:
                poll_task = group.create_task(self.poller.run())
                async with asyncio.TaskGroup() as submitters:
                    submitters.create_task(feed(self))
                    for _ in range(self.settings.concurrency):
                        submitters.create_task(self._work())
                self.poller.submissions_over()
                await poll_task
        finally:
            for task in (reporter, stopper, slots_watch):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.writer.flush()
        if self.stop.is_set() and self.settings.cancel_remote_on_stop and not self.run_stopped:
            await self.poller.cancel_remote()
            self.writer.flush()
        last = self.snapshot()
        self.limiter_events.record(last)
        if self.progress:
            self.progress.finish(last)

    async def _watch_slots(self) -> None:
        """A render slot freed in another process (a cap held by the Prefect server): the jobs
        waiting for one are fed again."""
        while True:
            await self.slots.freed()
            if self.jobs_waiting_slot:
                self.jobs_waiting_slot.clear()
                self.slot_freed.set()

    async def _end_waits_on_stop(self) -> None:
        """The first stop ends every wait for a token at once: submissions' and polls'."""
        await self.stop.wait()
        self.submit_waits.interrupt()
        self.poller.token_waits.interrupt()

    def stop_billing(self, message: str) -> None:
        """No new billed submission: the workers waiting for a token or for room give their items back."""
        self.billing_stopped = self.billing_stopped or message
        self.submit_waits.interrupt()
        self._room_changed()

    @property
    def submitting(self) -> bool:
        return not (self.stop.is_set() or self.billing_stopped or self.run_stopped)

    @property
    def stop_reason(self) -> str | None:
        return self.stop_reason_with({})

    def stop_reason_with(self, pending_by_job: dict[str, int]) -> str | None:
        """Why the run stopped early, then every job its own budget stopped (the others went on)."""
        reasons = [
            self.run_stopped
            or self.billing_stopped
            or (USER_STOP_MESSAGE if self.stop.is_set() else "")
            or self.stuck_stopped
            or ""
        ]
        for job, why in self.jobs_stopped.items():
            left = pending_by_job.get(job)
            reasons.append(f"job {job} stopped{f' with {left} items pending' if left else ''}: {why}")
        return "; ".join(reason for reason in reasons if reason) or None

    def job_held(self, job: str) -> bool:
        return job in self.jobs_stopped or job in self.jobs_waiting or job in self.jobs_waiting_slot

    async def _work(self) -> None:
        while (row := await self.queue.get()) is not None:
            try:
                if self.submitting:
                    self.in_flight += 1
                    try:
                        await self._submit(row)
                    finally:
                        self.in_flight -= 1
            finally:
                self.queued.discard(row.key)

    # -- one billed submission ---------------------------------------------------------------

    async def _submit(self, row: Row) -> None:
        calls = CALLS.get(row.kind)
        attempt = row.attempts + 1
        call = BilledCall(row.key, row.item_id, row.job, row.kind, row.request, attempt)
        if calls is None:
            # A store written by another version: nothing is sent, and the item ends failed
            # through the state machine's only way out of pending (both moves in one commit).
            reason = f"unknown kind '{row.kind}': not sent; this version of relaybatch cannot run it"
            await self.writer.write(
                Change(row.key, SENDING, {}, reason), Change(row.key, FAILED, {"last_error": reason}, reason)
            )
            self.count_finished(row.kind, FAILED)
            return
        if self.job_held(row.job):
            return  # its budget is reached (or waits for its calls in flight): the item stays pending
        if not calls.is_async:
            await self._send(row, call, attempt)
            return
        # A render: it needs a slot of its job and its model (render_slots.py) before it is sent.
        model = str(row.request.get("model") or "")
        took: list[bool] = []

        async def take() -> None:
            took.append(await self.slots.take(row.job, model))

        # A cap held by the Prefect server may wait for it to answer: a stop ends the wait.
        if not await self.submit_waits.until(take()) or not took[0]:
            self.jobs_waiting_slot.add(row.job)  # the item stays pending; fed again when one frees
            return
        if not self.submitting:
            self.render_ended(row.job, model)
            return
        started = False
        try:
            started = await self._send(row, call, attempt)
        finally:
            if not started:
                self.render_ended(row.job, model)

    def render_ended(self, job: str, model: str) -> None:
        """A render ended (or its create started none): free its slot, feed the waiting jobs."""
        self.slots.release(job, model)
        if self.jobs_waiting_slot:
            self.jobs_waiting_slot.clear()
            self.slot_freed.set()

    async def _send(self, row: Row, call: BilledCall, attempt: int) -> bool:
        """Send one billed create and record its answer; True when it started remote work."""
        if self.spend is not None and not await self.admit(self.spend, call):
            return False  # the item stays pending
        self.hook("reserved", row.key)
        timing = SendTiming()
        SEND_TIMING.set(timing)  # this worker task's context: the client records into it
        if not await self.take_token(call):
            return False
        try:
            # The reservation is committed with (just before) this write: durable before the send.
            await self.writer.write(Change(row.key, SENDING, {"attempts": attempt}))
        except BaseException:
            self.release(call)  # never sent
            raise
        if not self.submitting:
            # Stopped during the commit: nothing has left, so the item goes back, unbilled.
            self.release(call)
            await self.writer.write(Change(row.key, PENDING, {"attempts": row.attempts}, STOPPED_BEFORE_SEND))
            return False
        self.hook("sending_committed", row.key)
        self.sent += 1
        sent = await self.send(row, call, row.request, timing)
        if sent is None:
            return False
        outcome, latency_ms, waited_ms = sent
        output = self.settings.outputs.get(row.job)
        if isinstance(outcome, Finished) and output is not None:
            await settle_structured(self, row, call, outcome, latency_ms, waited_ms, output)
            return False
        cost = self.settle(replace(call, latency_ms=latency_ms), outcome.result)
        if isinstance(outcome, Finished):
            await self.finish_done(row, outcome.result, latency_ms, waited_ms, cost)
        else:
            await self._submitted(row, outcome, latency_ms, waited_ms, cost)
        self.hook("result_committed", row.key)
        return isinstance(outcome, Submitted)

    async def _submitted(
        self, row: Row, outcome: Submitted, latency_ms: float, waited_ms: float, cost: Decimal | None
    ) -> None:
        """A create that started remote work: the item is submitted, and the poller follows it."""
        fields = {
            "remote_id": outcome.remote_id,
            "result": outcome.result,
            "latency_ms": latency_ms,
            "limiter_wait_ms": waited_ms,
            "submitted_at": now_ms(),
            "cost_usd": cost,
        }
        await self.writer.write(Change(row.key, SUBMITTED, fields))
        self.poller.add(
            row.key,
            row.kind,
            outcome.remote_id,
            SUBMITTED,
            request=row.request,
            job=row.job,
            name=row.item_id,
        )

    async def finish_done(
        self, row: Row, result: dict[str, Any], latency_ms: float, waited_ms: float, cost: Decimal | None
    ) -> None:
        """A synchronous answer ends the item done, with its result, timings and cost."""
        fields = {
            "result": result,
            "latency_ms": latency_ms,
            "limiter_wait_ms": waited_ms,
            "finished_at": now_ms(),
            "cost_usd": cost,
        }
        await self.writer.write(Change(row.key, DONE, fields))
        self.count_finished(row.kind, DONE)

    async def take_token(self, call: BilledCall) -> bool:
        """The limiter's token before `sending`: an item waiting at the limit is not sent, and a
        stop ends the wait (docs/engine.md, "Sending"); then False, the reservation given back."""
        self.waiting_for_token += 1
        try:
            taken = await self.submit_waits.until(self.client.take_token("submit"))
        finally:
            self.waiting_for_token -= 1
        if not taken or not self.submitting:
            self.release(call)
            return False
        if self.spend is not None:
            self.spend.sending(call)  # its reservation is durable with (or before) the `sending` write
        return True

    async def send(
        self, row: Row, call: BilledCall, request: dict[str, Any], timing: SendTiming
    ) -> tuple[Finished | Submitted, float, float] | None:
        """Send one billed create (its reservation, token and ``sending`` already taken and durable,
        ``timing`` the context's): the outcome, its send-to-answer and limiter-wait milliseconds;
        None when it failed (already recorded)."""
        calls = CALLS[row.kind]
        started = time.monotonic()
        try:
            outcome = await calls.submit(self.client, request, MediaFiles(self.run_dir, row.key))
        except GatewayError as error:
            self.hook("answered", row.key)
            await record_error(self, row, call, call.attempt, error)
            return None
        except KindNotAvailable as error:
            self.release(call)
            await self.writer.write(
                Change(row.key, FAILED, {"last_error": str(error), "attempts": row.attempts})
            )
            return None
        except (ValueError, KeyError, TypeError, OSError) as error:
            # The gateway answered (and billed) but the answer could not be read or saved.
            cost = self.settle(call, None)
            reason = f"answer could not be used: {type(error).__name__}: {error}"
            await self.writer.write(Change(row.key, FAILED, {"last_error": reason, "cost_usd": cost}, reason))
            return None
        self.hook("answered", row.key)
        # One definition (docs/costs.md): send-to-answer of the request that succeeded; the time
        # spent waiting for the limiter is its own figure. Both ride in the result, so the ledger
        # row and the results row show the same numbers.
        latency_ms = (time.monotonic() - (timing.last_sent_at or started)) * 1000.0
        return outcome, latency_ms, timing.limiter_wait_seconds * 1000.0

    # -- spend seam --------------------------------------------------------------------------

    async def admit(self, spend: SpendGuard, call: BilledCall) -> bool:
        """Reserve the call's worst case. Refused by the run's budget only for the reservations of
        calls in flight (each settles at or below its worst case), the worker waits for one of them
        to settle and asks again; it never polls. A refusal with nothing in flight, or by spend
        alone, stops the run's submissions; a job's budget holds or stops only that job."""
        while True:
            room = self.room  # taken before asking: any settlement from here on wakes the wait
            refused: Refused | None = None
            if isinstance(spend, SharedRoom):
                # The budget held by the Prefect server: room for this call set aside first (the
                # wait for the server, if it cannot be reached, ends with a stop).
                answers: list[Refused | None] = []

                async def ask(shared: SharedRoom = spend, answers: list[Refused | None] = answers) -> None:
                    answers.append(await shared.room_for(call))

                self.waiting_for_room += 1  # not in flight while it waits for the server
                try:
                    if not await self.submit_waits.until(ask()) or not self.submitting:
                        return False
                finally:
                    self.waiting_for_room -= 1
                refused = answers[0]
            if refused is None:
                if spend.reserve(call):
                    return True
                refused = spend.refusal(call)
            if refused.job is not None:
                if refused.may_fit_later:
                    self.jobs_waiting.add(refused.job)  # fed again once one of its calls settles
                else:
                    self.jobs_stopped.setdefault(refused.job, refused.message)  # only this job stops
                return False
            if not refused.may_fit_later:
                self.stop_billing(refused.message)
                return False
            self.waiting_for_room += 1
            try:
                await self._wait_for_room(room)
            finally:
                self.waiting_for_room -= 1
            if not self.submitting:
                return False

    async def _wait_for_room(self, room: asyncio.Event) -> None:
        """Until a reservation ends (``room``) or the run is stopped."""
        waits = {asyncio.ensure_future(room.wait()), asyncio.ensure_future(self.stop.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _room_changed(self) -> None:
        self.room.set()
        self.room = asyncio.Event()

    def settle(self, call: BilledCall, result: dict[str, Any] | None) -> Decimal | None:
        if self.spend is None:
            return None
        cost = self.spend.settle(call, result)
        self._reservation_ended(call.job)
        self.hook("settled", call.key)
        if cost is not None:
            self.spent += cost
            self.priced = True
        return cost

    def release(self, call: BilledCall) -> None:
        if self.spend is not None:
            self.spend.release(call)
            self._reservation_ended(call.job)

    def _reservation_ended(self, job: str) -> None:
        self.jobs_waiting.discard(job)
        self._room_changed()

    def stuck_end(self, stuck: list[Any]) -> None:
        """Every open item is a render past its deadline, or waits for a render slot only such renders
        hold: the run ends by itself, resumable."""
        names = [entry.watch.name if entry.watch else entry.key[:12] for entry in stuck[:5]]
        listed = ", ".join(names) + (" ..." if len(stuck) > 5 else "")
        self.stuck_stopped = (
            f"{len(stuck)} render(s) stuck past their render deadline ({listed}): nothing else can go on, "
            "so the run ends; `relaybatch status` names them; run again to poll them again, or cancel "
            "them with `relaybatch cancel RUN --all-open`"
        )

    # -- progress ----------------------------------------------------------------------------

    def count_finished(self, kind: str, state: str) -> None:
        name = f"{kind}:{state}"
        self.finished[name] = self.finished.get(name, 0) + 1

    def snapshot(self) -> Snapshot:
        return snapshot_of(self)

    async def _report(self) -> None:
        while True:
            snapshot = self.snapshot()
            if self.progress is not None:
                self.progress.update(snapshot)
            self.limiter_events.record(snapshot)
            await asyncio.sleep(REPORT_EVERY_SECONDS)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exception in group.exceptions:
        leaves.extend(_leaves(exception) if isinstance(exception, BaseExceptionGroup) else [exception])
    return leaves


async def execute(
    store: CheckpointStore,
    client: GatewayClient,
    concurrency: int = 64,
    *,
    settings: EngineSettings | None = None,
    limiter: WatchedLimiter | None = None,
    spend: SpendGuard | None = None,
    stop: asyncio.Event | None = None,
    hook: Hook | None = None,
    progress: ProgressReporter | None = None,
    slots: RenderSlots | None = None,
) -> RunSummary:
    """Drive every item of the store to a terminal state (or to a resumable stop); see docs/engine.md."""
    settings = _with_stored_policy(store, settings or EngineSettings(concurrency=concurrency))
    # Recorded first: an execution with a start and no end is one whose process died.
    store.record_start()
    prepare_resume(store, settings.uncertain_policy)
    execution = Execution(
        store,
        client,
        settings,
        limiter=limiter,
        spend=spend,
        stop=stop,
        hook=hook,
        progress=progress,
        slots=slots,
    )
    execution.poller.load_remote_work()
    execution.poller.load_missing_media()
    execution.poller.note_lost_answer_media()
    try:
        with fewer_collections():
            await execution.run()
    except BaseExceptionGroup as group:
        # Failures of one kind inside the task groups: raise the first as itself, as callers expect.
        leaves = _leaves(group)
        if len({type(leaf) for leaf in leaves}) == 1:
            raise leaves[0] from None
        raise
    return _summary(store, execution)


def _with_stored_policy(store: CheckpointStore, settings: EngineSettings) -> EngineSettings:
    """The run's stored ``uncertain: resend`` wins over the default ``report``."""
    stored_policy = store.run_settings().get("uncertain_policy")
    if settings.uncertain_policy == "report" and stored_policy == "resend":
        return EngineSettings(**{**settings.__dict__, "uncertain_policy": "resend"})
    return settings


def _summary(store: CheckpointStore, execution: Execution) -> RunSummary:
    """The execution's end recorded (why it stopped, what it sent) and summed up."""
    pending_by_job = {job: counts.get(PENDING, 0) for job, counts in store.count_by_job_and_state().items()}
    stopped = execution.stop_reason_with(pending_by_job)
    store.record_stop(stopped, sent=execution.sent)
    return RunSummary(
        sent=execution.sent,
        counts=store.count_by_state(),
        stopped=stopped,
        spent_usd=execution.spent if execution.priced else None,
        jobs_stopped=dict(execution.jobs_stopped),
    )


__all__ = ["POLLING", "EngineSettings", "RunSummary", "execute", "mark_interrupted_sends"]
