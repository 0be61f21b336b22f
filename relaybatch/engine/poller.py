"""Polling of async kinds (V2 video, V1 tasks) until each reaches a terminal state.

Each submitted item has a next-poll time: the interval grows by ``backoff`` per poll up to
``max_seconds``, with jitter so items created together spread out. When the poll budget is tight
(the limiter's share for polls, shared by everything waiting) the interval grows to fit it, so
500 videos at 120 requests per minute are polled less often rather than queueing in the bucket
ahead of new submissions. Polls are free and the work behind them is paid, so a poll answered with
an error (anything but a 404 of an unknown id) is asked again with back-off for
``error_window_seconds``; then the item fails marked ``RETRY_POLL`` and the next execution polls
it again (resume.py).

Missing media: every polled kind downloads its files at the poll that sees its work complete. A
done item of such a kind whose files are missing when an execution starts (a V1 task finished by a
relaybatch older than V1 downloads, a media folder deleted or moved) is polled once more: that
poll downloads them as a first completion would, and the item stays done either way (``done ->
done``), with the new files in its result, or with why they could not be fetched in
``last_error`` (an expired link, a video the gateway no longer has); the next execution tries again.
Images (the images route, generate-content image parts) come inside the answer: a lost file cannot
be fetched again, so an execution only records why in ``last_error`` (once; cleared when the files
are back) and `relaybatch status` lists them. Nothing is sent again: that would be billed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relaybatch.engine.kinds import CALLS, KindNotAvailable, PollAnswer
from relaybatch.engine.media import MediaFiles, files_missing
from relaybatch.engine.outcomes import STOP_RUN_MESSAGE
from relaybatch.engine.poll_plan import (
    RenderSettings,
    RenderTimes,
    RenderWatch,
    deadline_for,
    first_delay,
    next_delay,
    watch_for,
)
from relaybatch.engine.states import CANCELLED, DONE, FAILED, POLLING, RETRY_POLL, SUBMITTED
from relaybatch.engine.stop_waits import StopWaits
from relaybatch.engine.store import Change, now_ms
from relaybatch.gateway import APIStatusError, AuthenticationFailed, GatewayError, NotFound
from relaybatch.gateway.retry import retry_delay
from relaybatch.gateway.sending import SEND_TIMING, SendTiming
from relaybatch.limiting import WatchedLimiter

if TYPE_CHECKING:
    from relaybatch.engine.runner import Execution

REMOTE_CANCELLED_MESSAGE = "cancelled on request: the remote video was deleted (DELETE) before it finished"
MEDIA_FETCHED_MESSAGE = "media files were missing: downloaded again"
MEDIA_MISSING_MESSAGE = "media files are missing and could not be downloaded again"
MEDIA_BACK_MESSAGE = "media files are back on disk"
# Kinds whose files come inside the answer (images): nothing can fetch a lost one again.
ANSWER_MEDIA_KINDS = ("image", "generate_content")
ANSWER_MEDIA_LOST = (
    f"{MEDIA_MISSING_MESSAGE}: they came inside the answer, which the gateway does not keep; only "
    "sending the request again (billed, as a new item) would make new ones"
)
# The kinds whose work is polled, and whose files are downloaded when it completes.
POLLED_KINDS = tuple(kind for kind, calls in CALLS.items() if calls.is_async)


@dataclass(frozen=True)
class PollSettings:
    initial_seconds: float = 5.0
    max_seconds: float = 60.0
    backoff: float = 1.5
    jitter: float = 0.2
    concurrency: int = 32
    # Paid work is not given up on one answer: polls answered with an error (any 4xx but a 404,
    # 5xx, no answer, a download that is not whole) are retried with back-off for this long. Then
    # the item fails, marked so that the next execution polls it again (never creates it again).
    error_window_seconds: float = 600.0
    # A render past its deadline (stuck) that is kept is polled this often (poll_plan.py).
    stuck_seconds: float = 300.0


@dataclass(order=True)
class _Due:
    due: float
    sequence: int
    key: str = field(compare=False)
    kind: str = field(compare=False)
    remote_id: str = field(compare=False)
    state: str = field(compare=False)
    polls: int = field(default=0, compare=False)
    errors: int = field(default=0, compare=False)
    failing_since: float | None = field(default=None, compare=False)
    watch: RenderWatch | None = field(default=None, compare=False)  # the poll plan's view of it
    stuck: bool = field(default=False, compare=False)


ALIGN_SLACK_SECONDS = 2.0


def stuck_reason(watch: RenderWatch, now: float) -> str:
    return (
        f"stuck: rendering for {now - watch.created:.0f} s, past its render deadline of "
        f"{watch.deadline:.0f} s (expected {watch.expected:.0f} s); last status "
        f"{watch.last_status or 'unknown'}"
    )


def _align_created(watch: RenderWatch, created_at: Any, now: float) -> None:
    """The gateway's creation time (Unix seconds), in the poller's clock: a resumed item's age is
    its real age, not the time since this execution began."""
    if isinstance(created_at, int | float):
        created = now - max(0.0, time.time() - float(created_at))
        if created < watch.created - ALIGN_SLACK_SECONDS:  # gateways give whole seconds
            watch.created = created


class Poller:
    def __init__(
        self,
        execution: Execution,
        settings: PollSettings,
        limiter: WatchedLimiter | None = None,
        renders: RenderSettings | None = None,
    ) -> None:
        self.execution = execution
        self.settings = settings
        self.limiter = limiter
        self.renders = renders or RenderSettings()
        self.times = RenderTimes()  # render times this run measured, per model and length
        self.heap: list[_Due] = []
        self.active = 0
        self.given_up = 0  # items failed on poll answers this execution (re-polled by the next)
        self._broken = False  # a poll raised: the group is shutting down, start no more polls
        self.rng = random.Random()
        self._sequence = itertools.count()
        self._wake = asyncio.Event()
        self._over = False
        # Polls waiting for the limiter's token; a stop ends them (the item is polled on resume).
        self.token_waits = StopWaits()

    @property
    def waiting(self) -> int:
        return len(self.heap) + self.active

    def add(
        self,
        key: str,
        kind: str,
        remote_id: str,
        state: str,
        delay: float | None = None,
        *,
        request: dict[str, Any] | None = None,
        job: str = "",
        name: str = "",
    ) -> None:
        """Queue a poll of remote work; with its ``request``, the poll plan times it (poll_plan.py)."""
        now = time.monotonic()
        watch = None if request is None else watch_for(request, job, now, self.times, self.renders, name)
        if delay is None:
            delay = self.interval(0) if watch is None else first_delay(watch, now, self.settings.max_seconds)
        entry = _Due(now + delay, next(self._sequence), key, kind, remote_id, state, watch=watch)
        heapq.heappush(self.heap, entry)
        self._wake.set()

    @property
    def stuck(self) -> list[_Due]:
        return [entry for entry in self.heap if entry.stuck]

    def stuck_lines(self, most: int = 5) -> tuple[str, ...]:
        """The live display's lines for stuck renders: item, age, last status."""
        now = time.monotonic()
        stuck = [entry for entry in self.heap if entry.stuck and entry.watch is not None]
        lines = [
            f"{watch.name or entry.key[:12]} (job {watch.job}) {now - watch.created:.0f} s old, "
            f"last status {watch.last_status or 'unknown'}"
            for entry in stuck[:most]
            if (watch := entry.watch) is not None
        ]
        return tuple(lines + ([f"... and {len(stuck) - most} more"] if len(stuck) > most else []))

    def only_stuck_left(self) -> bool:
        """Every open remote item is past its render deadline (and none is being polled now)."""
        return self.active == 0 and bool(self.heap) and all(entry.stuck for entry in self.heap)

    def load_remote_work(self) -> int:
        """Queue items submitted by an earlier execution: they are polled, never created again."""
        count = 0
        for state in (SUBMITTED, POLLING):
            cursor = 0
            while page := self.execution.store.work_page(state, cursor, 1000):
                cursor = page[-1].rowid
                for row in page:
                    self.add(
                        row.key,
                        row.kind,
                        row.remote_id or "",
                        state,
                        0.0,
                        request=row.request,
                        job=row.job,
                        name=row.item_id,
                    )
                    # Paid and rendering: it holds a render slot, whatever the caps say.
                    self.execution.slots.occupy(row.job, str(row.request.get("model") or ""))
                    count += 1
        return count

    def load_missing_media(self) -> int:
        """Queue done items of polled kinds whose media files are missing (module docstring)."""
        started = self.execution.kinds_at_start
        if not any(kind in started and started[kind].finished_before for kind in POLLED_KINDS):
            return 0  # nothing of these kinds finished: the store is not read
        count, cursor, run_dir = 0, 0, self.execution.run_dir
        while page := self.execution.store.done_page(POLLED_KINDS, cursor, 1000):
            cursor = page[-1][0]
            for _, key, kind, remote_id, result, _ in page:
                if remote_id and files_missing(run_dir, result):
                    self.add(key, kind, remote_id, DONE, delay=0.0)
                    count += 1
        return count

    def note_lost_answer_media(self) -> int:
        """Say which done items of answer-media kinds lost their files (module docstring): the
        reason goes in ``last_error`` once, and goes again when the files are back. Nothing is sent."""
        started = self.execution.kinds_at_start
        if not any(kind in started and started[kind].finished_before for kind in ANSWER_MEDIA_KINDS):
            return 0  # nothing of these kinds finished: the store is not read
        store, run_dir = self.execution.store, self.execution.run_dir
        changes: list[Change] = []
        cursor, lost = 0, 0
        while page := store.done_page(ANSWER_MEDIA_KINDS, cursor, 1000):
            cursor = page[-1][0]
            for _, key, _, _, result, note in page:
                missing = bool((result or {}).get("media_paths")) and files_missing(run_dir, result)
                noted = (note or "").startswith(MEDIA_MISSING_MESSAGE)
                lost += missing
                if missing and not noted:
                    changes.append(Change(key, DONE, {"last_error": ANSWER_MEDIA_LOST}, ANSWER_MEDIA_LOST))
                elif noted and not missing:
                    changes.append(Change(key, DONE, {"last_error": None}, MEDIA_BACK_MESSAGE))
        for start in range(0, len(changes), 1000):
            store.apply(changes[start : start + 1000])
        return lost

    def submissions_over(self) -> None:
        """Polls may now use the whole rate: bring forward polls that were spaced out to fit the
        poll share, in the order they are due, one poll budget slot apart (500 videos at 120 rpm
        waited up to 461 s for a poll after the last create; the whole rate allows 252 s). Planned
        polls (poll_plan.py) keep their time: they are due when the render should end."""
        self._over = True
        budget = self._poll_budget()
        if budget and self.heap:
            now = time.monotonic()
            entries = sorted(self.heap)
            for slot, entry in enumerate(entries, start=1):
                if entry.watch is None:
                    entry.due = min(entry.due, now + slot / budget)
            heapq.heapify(entries)
            self.heap = entries
        self._wake.set()

    def interval(self, polls: int) -> float:
        """Seconds to the next poll of an item polled ``polls`` times, stretched to fit the budget.

        Jitter never takes an interval past ``max_seconds``: a video is polled at least that
        often unless the limit cannot carry it (then the budget decides)."""
        settings = self.settings
        base = settings.initial_seconds * settings.backoff ** min(polls, 60)
        base *= 1.0 + settings.jitter * (2.0 * self.rng.random() - 1.0)
        base = min(settings.max_seconds, base)
        budget = self._poll_budget()
        if budget:
            base = max(base, self.waiting / budget)
        return base

    def _poll_budget(self) -> float | None:
        """Polls per second this poller may use: its guaranteed share while submissions go on,
        the whole rate once they are over."""
        if self.limiter is None:
            return None
        if self._over:
            rpm = self.limiter.requests_per_minute
            return rpm / 60.0 if rpm else None
        return self.limiter.poll_budget_per_second()

    # -- the loop -----------------------------------------------------------------------------

    def _stopping(self) -> bool:
        return self.execution.stop.is_set() or self.execution.run_stopped is not None

    async def run(self) -> None:
        slots = asyncio.Semaphore(self.settings.concurrency)
        async with asyncio.TaskGroup() as polls:
            while not self._stopping() and not self._broken:
                if not self.heap:
                    if self._over and self.active == 0:
                        return
                    await self._sleep(1.0)
                    continue
                if self._over and self.only_stuck_left():
                    self.execution.stuck_end(self.stuck)
                    return
                wait = self.heap[0].due - time.monotonic()
                if wait > 0:
                    await self._sleep(wait)
                    continue
                entry = heapq.heappop(self.heap)
                await slots.acquire()
                # A poll that failed meanwhile has cancelled this loop: let that arrive here, not
                # as a create_task on a group that is shutting down.
                await asyncio.sleep(0)
                if self._broken:
                    slots.release()
                    break
                self.active += 1
                polls.create_task(self._poll_and_release(entry, slots))

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        # asyncio.timeout, not wait_for: wait_for can swallow a cancellation that arrives as the
        # event fires (Python 3.11), and a failed poll cancels this loop exactly then.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(seconds, 0.2)):
                await self._wake.wait()

    async def _poll_and_release(self, entry: _Due, slots: asyncio.Semaphore) -> None:
        try:
            await self._poll(entry)
        except BaseException:
            self._broken = True
            raise
        finally:
            self.active -= 1
            slots.release()
            self._wake.set()

    def _again(self, entry: _Due, delay: float | None = None) -> None:
        entry.polls += 1
        entry.due = time.monotonic() + (self.interval(entry.polls) if delay is None else delay)
        entry.sequence = next(self._sequence)
        heapq.heappush(self.heap, entry)

    async def _poll(self, entry: _Due) -> None:
        if entry.state == DONE:
            await self._fetch_missing_media(entry)
            return
        execution = self.execution
        write = execution.writer.write
        SEND_TIMING.set(SendTiming())  # this poll's task: the token it takes is for its first request
        if not await self.token_waits.until(execution.client.take_token("poll")):
            return  # stopped while waiting: not sent; the next execution polls it
        execution.hook("poll_sending", entry.key)
        try:
            answer = await self._ask(entry)
        except NotFound as error:
            # The one definitive poll answer: the gateway does not know this id (any account's).
            reason = f"the gateway no longer knows {entry.remote_id}: {error}"
            await write(Change(entry.key, FAILED, {"last_error": reason, "finished_at": now_ms()}, reason))
            self._ended(entry, FAILED)
            return
        except KindNotAvailable as error:
            await write(Change(entry.key, FAILED, {"last_error": str(error)}, str(error)))
            self._ended(entry, None)
            return
        except APIStatusError as error:
            if error.status < 400:
                # A success answer describing a failed task (the client reads its `error` field).
                await self._finish(entry, FAILED, None, str(error))
            else:
                await self._poll_error(entry, error)
            return
        except (GatewayError, OSError) as error:
            await self._poll_error(entry, error)
            return
        if answer is None:
            return  # the key was refused: the run stops
        execution.hook("poll_answered", entry.key)
        entry.errors, entry.failing_since = 0, None
        if answer.status == "running":
            await self._still_running(entry, answer)
        else:
            state = {"done": DONE, "failed": FAILED, "cancelled": CANCELLED}[answer.status]
            watch = entry.watch
            if state == DONE and watch is not None:
                remote = (answer.result or {}).get("remote") or {}
                if self.times.learn(watch.model, watch.seconds, remote, time.monotonic() - watch.created):
                    self._replan(watch)
            await self._finish(entry, state, answer.result, answer.error)
        execution.hook("poll_committed", entry.key)

    def _replan(self, measured: RenderWatch) -> None:
        """The run measured renders of this kind: renders of the kind still waiting for their first
        poll take the measured time (poll_plan.py, 1)."""
        expected = self.times.measured(measured.model, measured.seconds)
        if expected is None:
            return
        now, moved = time.monotonic(), False
        for entry in self.heap:
            watch = entry.watch
            if (
                watch is None
                or entry.polls
                or (watch.model, watch.seconds) != (measured.model, measured.seconds)
            ):
                continue
            watch.expected, watch.measured = expected, True
            watch.deadline = deadline_for(self.renders.job(watch.job), expected)
            entry.due = now + first_delay(watch, now, self.settings.max_seconds)
            moved = True
        if moved:
            heapq.heapify(self.heap)

    def _ended(self, entry: _Due, state: str | None) -> None:
        """The entry's remote work left this poller for good: count it, free its render slot."""
        if state is not None:
            self.execution.count_finished(entry.kind, state)
        if entry.watch is not None:
            self.execution.render_ended(entry.watch.job, entry.watch.model)

    async def _still_running(self, entry: _Due, answer: PollAnswer) -> None:
        """Record what the poll saw (the status verbatim, a word this client may not know, and
        when: `relaybatch status` names open items by both), then plan the next poll; a render
        past its deadline is stuck: named, then polled slowly or cancelled (poll_plan.py)."""
        now = time.monotonic()
        remote = (answer.result or {}).get("remote") or {}
        watch = entry.watch
        if watch is not None:
            _align_created(watch, remote.get("created_at"), now)
            watch.seen(remote.get("status"), remote.get("progress"), now)
            progress = remote.get("progress")
            if self.times.learn_progress(watch.model, watch.seconds, now - watch.created, progress):
                self._replan(watch)
        fields: dict[str, Any] = {"result": {**(answer.result or {}), "polled_at": now_ms()}}
        detail = None
        if watch is not None and watch.stuck(now) and not entry.stuck:
            entry.stuck = True
            detail = fields["last_error"] = stuck_reason(watch, now)
        await self.execution.writer.write(Change(entry.key, POLLING, fields, detail))
        entry.state = POLLING
        if entry.stuck:
            if self.renders.job(watch.job if watch else "").on_deadline == "cancel":
                await self._cancel_stuck(entry, now)
                return
            self._again(entry, self.settings.stuck_seconds)
        elif watch is not None:
            self._again(entry, next_delay(watch, now, self.settings.max_seconds, self.settings.backoff))
        else:
            self._again(entry)

    async def _cancel_stuck(self, entry: _Due, now: float) -> None:
        """The job's policy cancels renders past their deadline: DELETE, and record why."""
        cancel = CALLS[entry.kind].cancel
        assert entry.watch is not None
        if cancel is None:  # V1 tasks have no cancel route: kept, polled slowly
            self._again(entry, self.settings.stuck_seconds)
            return
        try:
            await cancel(self.execution.client, entry.remote_id)
        except GatewayError:
            self._again(entry, self.settings.stuck_seconds)
            return
        reason = f"cancelled at its render deadline: {stuck_reason(entry.watch, now)}"
        await self._finish(entry, CANCELLED, None, reason)

    async def _ask(self, entry: _Due) -> PollAnswer | None:
        """One poll of the entry's remote work (files downloaded when it is complete); None when
        the gateway refused the key: the run stops, as it does for a refused create."""
        execution = self.execution
        try:
            return await CALLS[entry.kind].poll(  # type: ignore[misc]
                execution.client, entry.remote_id, MediaFiles(execution.run_dir, entry.key)
            )
        except AuthenticationFailed:
            execution.run_stopped = execution.run_stopped or STOP_RUN_MESSAGE
            execution.stop.set()
            return None

    async def _fetch_missing_media(self, entry: _Due) -> None:
        """One poll of a done item whose files are missing: it downloads them when the remote work
        is still complete; whatever the answer, the item stays done (module docstring)."""
        execution = self.execution
        try:
            answer = await self._ask(entry)
        except (GatewayError, KindNotAvailable, OSError) as error:
            why = str(error)
        else:
            if answer is None:
                return  # the key was refused: the run stops
            if answer.status == "done":
                fields = {"result": answer.result, "last_error": None}
                await execution.writer.write(Change(entry.key, DONE, fields, MEDIA_FETCHED_MESSAGE))
                return
            why = answer.error or f"the remote work is {answer.status} now"
        reason = f"{MEDIA_MISSING_MESSAGE}: {why}"
        await execution.writer.write(Change(entry.key, DONE, {"last_error": reason}, reason))

    async def _finish(
        self, entry: _Due, state: str, result: dict[str, Any] | None, error: str | None
    ) -> None:
        fields: dict[str, Any] = {"finished_at": now_ms()}
        if result is not None:
            fields["result"] = result
        if error:
            fields["last_error"] = error
        await self.execution.writer.write(Change(entry.key, state, fields, error))
        self._ended(entry, state)

    async def _poll_error(self, entry: _Due, error: Exception) -> None:
        """Polls are free and the work is paid: ask again after the run's back-off (the server's
        wait first), for ``error_window_seconds`` from the first failure in a row. Then fail the
        item, marked ``RETRY_POLL`` so the next execution polls it again."""
        now = time.monotonic()
        entry.errors += 1
        if entry.failing_since is None:
            entry.failing_since = now
        if now - entry.failing_since < self.settings.error_window_seconds:
            headers = error.headers if isinstance(error, APIStatusError) else {}
            delay = retry_delay(entry.errors, self.execution.retry, headers, self.rng.random())
            budget = self._poll_budget()
            self._again(entry, max(delay, self.waiting / budget) if budget else delay)
            return
        window = now - entry.failing_since
        reason = (
            f"polling {entry.remote_id} failed {entry.errors} times in a row over {window:.0f} s: "
            f"{error}; the paid work was kept, run again to poll it again"
        )
        fields = {"last_error": reason, "finished_at": now_ms(), "retryable": RETRY_POLL}
        await self.execution.writer.write(Change(entry.key, FAILED, fields, reason))
        self._ended(entry, FAILED)
        self.given_up += 1

    async def cancel_remote(self) -> int:
        """On a stop with cancel-remote: DELETE remote videos still running and record it."""
        cancelled = 0
        while self.heap:
            entry = heapq.heappop(self.heap)
            cancel = CALLS[entry.kind].cancel
            if cancel is None or entry.state == DONE:  # a done item's video is the user's: kept
                continue  # V1 tasks have no cancel route: they stay to be polled on resume
            try:
                await cancel(self.execution.client, entry.remote_id)
            except GatewayError:
                continue
            fields = {"last_error": REMOTE_CANCELLED_MESSAGE, "finished_at": now_ms()}
            await self.execution.writer.write(Change(entry.key, CANCELLED, fields, REMOTE_CANCELLED_MESSAGE))
            self._ended(entry, CANCELLED)
            cancelled += 1
        return cancelled
