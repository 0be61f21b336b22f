"""The shared adaptive limiter: one per run, every gateway request passes it.

The limit is the smaller of the configured one and the one the gateway reports
(``x-ratelimit-limit-requests`` on any answer, ``error.rate_limit{rpm, qps}`` on a 429), used in
full rather than discounted: a request goes when the run's own send times admit it
(``send_windows``): fewer than the limit in the trailing minute plus a jitter margin, and the
per-second pace (qps), evenly spaced. So a sliding or fixed minute window at the gateway
never sees more than the limit, and over two minutes nearly twice the limit goes through.
``x-ratelimit-remaining-requests`` caps what goes before its ``x-ratelimit-reset-requests``
(less the requests still on their way): the gateway's count is the truth when another process,
or an earlier run, shares the key.

A 429 that spent the window (no requests remain, or no count given) pauses every waiter until the
reported reset, then sends resume one at a time at the pace, so the whole run slows down together
rather than each worker discovering the limit on its own; an answer saying no requests remain
holds everyone until its reset. When the run's own sends fill the window the 429 names (the
cold-start probe below), the window frees exactly as they leave it: nobody waits out the
whole-second Retry-After on top, and since the gateway admitted the climb's bursts, sends that
fell behind the pace may catch up in bursts as large. A 429 whose answer says requests remain is
not the window's (an upstream or injected 429, another client's burst): it holds everyone only
for its own ``retry-after`` or a short back-off.

Cold start with no limit known (none configured, none reported yet): the limiter climbs a ladder
of request counts per trailing minute instead of opening wide. It sends one request and waits for
the answer (a gateway that reports its limit on every answer is then followed with no 429 at all);
then it lets the minute's count rise at full speed to the next rung, sends one probe alone at each
rung, and climbs only when the probe is answered. The rungs are the gateway's published plan
limits (6, 30, 120, 300, 600 per minute), then doubling, so against a window that reports its
limit only in a 429 the first window fills exactly at the limit and one probe gets the one 429
that names it. A custom limit between two rungs can still see up to the requests in flight at
that moment refused once. A configured limit applies from the first request.

Submissions and polls wait in two queues. Sends go to whichever queue is furthest behind its
share (weighted fair queueing), and a queue with nobody waiting lends its share to the other, so
polls never starve submissions, submissions never starve polls, and no send is left unused.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from relaybatch.engine.send_windows import CATCH_UP_SECONDS, JITTER_MARGIN_SECONDS, SendWindows
from relaybatch.gateway.retry import MAX_SERVER_WAIT_SECONDS, ServerHints, read_server_hints
from relaybatch.limiting import RequestPurpose

Lane = Literal["submit", "poll"]

# A 429 without any hint of the limit halves the rate; each clean second then wins back this
# fraction of the ceiling, so the rate converges back instead of staying low for the whole run.
DECREASE_FACTOR = 0.5
RECOVERY_PER_SECOND = 0.02
# Pause after a 429 that names no reset time: long enough for a per-second window to roll over.
# Also how long a remaining count without a reset time is trusted.
DEFAULT_PAUSE_SECONDS = 1.0
# A 429 while the window still admits requests says nothing about our rate: everyone holds back
# this long (or the answer's retry-after, capped), then carries on at the same rate. A hold costs
# no throughput: the sends the pace had due during it go when it ends (the timetable is kept).
NOT_WINDOW_HOLD_SECONDS = 0.5
MAX_NOT_WINDOW_HOLD_SECONDS = 5.0
# A granted request with no answer after this long (a dropped connection) stops counting as in flight.
UNANSWERED_TTL_SECONDS = 60.0
# The highest published plan limit; used only when an unconfigured run gets a 429 with no hint.
OPEN_BUCKET_FALLBACK_RPM = 600.0
# The cold-start ladder: one request first, then the published plan limits, then doubling.
LIMIT_RUNGS = (1, 6, 30, 120, 300, 600)
# A reported qps is the per-minute limit restated ("about" rpm / 60) unless it differs by more
# than its rounding to hundredths; only a lower per-second limit paces the run more slowly.
QPS_ROUNDING = 0.005 + 1e-9
# While a probe is out nothing else is granted; the dispatcher looks again this often.
PROBE_RECHECK_SECONDS = 0.005


def next_rung(count: int) -> int:
    """The first rung of the cold-start ladder above ``count`` requests per minute."""
    for rung in LIMIT_RUNGS:
        if rung > count:
            return rung
    rung = LIMIT_RUNGS[-1]
    while rung <= count:
        rung *= 2
    return rung


def _reported_rpm(hints: ServerHints, rate_limit: Mapping[str, Any] | None) -> float | None:
    """The limit a 429's ``error.rate_limit`` names, else ``x-ratelimit-limit-requests``."""
    if rate_limit:
        if isinstance(rate_limit.get("rpm"), int | float) and rate_limit["rpm"] > 0:
            return float(rate_limit["rpm"])
        if isinstance(rate_limit.get("qps"), int | float) and rate_limit["qps"] > 0:
            return float(rate_limit["qps"]) * 60.0
    return hints.limit_requests


def _reported_qps(rate_limit: Mapping[str, Any] | None) -> float | None:
    if rate_limit and isinstance(rate_limit.get("qps"), int | float) and rate_limit["qps"] > 0:
        return float(rate_limit["qps"])
    return None


@dataclass
class LimiterStats:
    granted: dict[str, int]
    rate_limited: int
    pauses: int
    requests_per_minute: float | None


class AdaptiveTokenBucket:
    """The run's limiter, shared by every request; implements ``relaybatch.limiting.Limiter``.

    ``requests_per_minute`` None means not configured (learned from the gateway); ``burst`` is
    the most requests sent together (default 1: evenly spaced at the pace); ``poll_share`` the
    fraction of requests reserved for polls when both wait; ``window_margin`` the arrival jitter
    the minute window allows for. ``clock`` and ``sleep`` are injectable so tests run on a fake
    clock. (The name stays from when it was a token bucket: the public API.)
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        *,
        burst: float | None = None,
        poll_share: float = 0.3,
        window_margin: float = JITTER_MARGIN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not 0.0 < poll_share < 1.0:
            raise ValueError("poll_share must be between 0 and 1 (exclusive)")
        configured = requests_per_minute if requests_per_minute and requests_per_minute > 0 else None
        self._configured = configured
        self._learned: float | None = None
        self._learned_qps: float | None = None  # a per-second limit below rpm / 60, if reported
        self._burst = burst
        self._shares: dict[Lane, float] = {"submit": 1.0 - poll_share, "poll": poll_share}
        self._clock = clock
        self._sleep = sleep
        self._ceiling = configured  # the limit: what the minute window counts against
        self._rate_per_minute = configured  # the pace now (below the ceiling after a bare 429)
        self._windows = SendWindows(window_margin)
        # The cold-start climb (None once a limit is known): the current rung.
        self._rung: int | None = LIMIT_RUNGS[0] if configured is None else None
        self._paused_until = 0.0
        self._admitted_since = -math.inf  # what _take_token last found, for _granted
        self._released_at = -math.inf  # when the climb let everyone go
        # After a hold, sends may catch up this much of the timetable, until the given time.
        self._held_seconds, self._held_catch_up_until = 0.0, -math.inf
        self._last_decrease = -math.inf
        # What the gateway's last remaining count still admits, and until when that count holds.
        self._room: float | None = None
        self._room_until = 0.0
        self._queues: dict[Lane, deque[asyncio.Future[None]]] = {"submit": deque(), "poll": deque()}
        self._virtual_time: dict[Lane, float] = {"submit": 0.0, "poll": 0.0}
        self._dispatcher: asyncio.Task[None] | None = None
        # Grant times of requests not answered yet; a request that never answers ages out.
        self._unanswered: deque[float] = deque()
        self.granted: dict[Lane, int] = {"submit": 0, "poll": 0}
        self.rate_limited = 0
        self.not_window_429s = 0  # of rate_limited: 429s while the window still had room
        self.pauses = 0
        self._learned_from = "headers"  # or "429": which answer taught the current limit

    # -- what the rest of the engine reads ---------------------------------------------------

    @property
    def requests_per_minute(self) -> float | None:
        """The rate the limiter currently allows; None while no limit is known."""
        return self._rate_per_minute

    def _per_second(self) -> float | None:
        """The pace: the rate per second, or a lower per-second limit the gateway reported."""
        if self._rate_per_minute is None:
            return None
        pace = self._rate_per_minute / 60.0
        return min(pace, self._learned_qps) if self._learned_qps is not None else pace

    def poll_budget_per_second(self) -> float | None:
        """Polls per second guaranteed when submissions also wait; None when unlimited."""
        pace = self._per_second()
        return None if pace is None else pace * self._shares["poll"]

    def limit_source(self) -> str:
        """Where the current rate comes from, for the progress display: ``configured``,
        ``headers`` or ``429`` (learned from that answer, or backed off after it), or ``probing``
        (no limit known yet: the cold-start climb)."""
        if self._rate_per_minute is None:
            return "probing"
        if self._ceiling is not None and self._rate_per_minute < self._ceiling:
            return "429"
        if self._configured is not None and self._rate_per_minute >= self._configured:
            return "configured"
        return self._learned_from

    def stats(self) -> LimiterStats:
        return LimiterStats(
            {lane: count for lane, count in self.granted.items()},
            self.rate_limited,
            self.pauses,
            self._rate_per_minute,
        )

    # -- Limiter protocol -------------------------------------------------------------------

    async def acquire(self, purpose: RequestPurpose = "submit") -> None:
        lane: Lane = "poll" if purpose == "poll" else "submit"
        if not self._queues["submit"] and not self._queues["poll"] and self._take_token():
            self._granted(lane, waited=False)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._queues[lane]:
            # A lane that was idle does not bank credit: it rejoins at the busy lane's position.
            other: Lane = "poll" if lane == "submit" else "submit"
            if self._queues[other]:
                self._virtual_time[lane] = max(self._virtual_time[lane], self._virtual_time[other])
        self._queues[lane].append(waiter)
        self._start_dispatcher()
        await waiter

    def observe(
        self,
        status: int,
        headers: Mapping[str, str],
        rate_limit: Mapping[str, Any] | None = None,
    ) -> None:
        if self._unanswered:
            self._unanswered.popleft()
        hints = read_server_hints(headers)
        reported = _reported_rpm(hints, rate_limit)
        if reported is None and self._rung is not None and status == 429:
            # A spent window that does not name its limit during the climb: it admitted what we
            # sent this minute, which was the rung at most.
            reported = float(max(1, self._windows.count(self._clock())))
        if reported is not None:
            if self._learned != reported:  # a new limit: remember who said so
                self._learned_from = "429" if status == 429 else "headers"
            self._learn(reported, _reported_qps(rate_limit))
        elif self._rung is not None:
            self._climb()
        remaining = hints.remaining_requests
        if status == 429:
            self.rate_limited += 1
            if remaining is not None and remaining > 0:
                self._not_the_windows_429(remaining, hints)
                return
            if reported is None:
                self._decrease()
            elif self._window_is_ours():
                # The window frees as our own sends leave it: the minute rule waits for that. And
                # the climb's bursts went through, so the gateway meters no second more strictly.
                if self._burst is None:
                    self._windows.allow_bursts(self._windows.densest(1.0), self._clock())
                return
            self._pause(hints.wait() or DEFAULT_PAUSE_SECONDS)
            return
        if remaining is None:
            self._room = None  # no count on this answer: the windows alone decide
        elif self._rate_per_minute is not None:
            # None remaining: nobody goes before the reset (on a sliding window, when its oldest
            # request leaves it: the windows then follow it, not a burst).
            self._cap_to_remaining(remaining, hints.reset_requests)
        self._recover()

    def no_answer(self) -> None:
        """A request that got no answer is not on its way any more. Before, it counted as unanswered
        for UNANSWERED_TTL_SECONDS, and while no limit is known the climb's probe waits for every
        request to be answered: one refused connection held the whole run for a minute."""
        if self._unanswered:
            self._unanswered.popleft()

    def _not_the_windows_429(self, remaining: float, hints: ServerHints) -> None:
        """A 429 from a window that still admits requests: the rate is not the cause, so the rate
        stays and nobody waits for the window's reset (up to 60 s on a sliding window). Everyone
        holds back briefly, as the answer asks; the refused request's own retry waits its own delay."""
        self.not_window_429s += 1
        self._cap_to_remaining(remaining, hints.reset_requests)
        hint = hints.retry_after
        self._hold(min(NOT_WINDOW_HOLD_SECONDS if hint is None else hint, MAX_NOT_WINDOW_HOLD_SECONDS))

    def _window_is_ours(self) -> bool:
        """Our own sends in the trailing minute fill the limit the 429 named: the gateway's
        window holds ours (arrivals come after sends), and frees as they leave our wider window."""
        return self._ceiling is not None and self._windows.count(self._clock()) >= self._ceiling

    # -- rate learning ------------------------------------------------------------------------

    def _climb(self) -> None:
        """An answer with no limit in it during the cold-start climb: a probe that went through
        (nothing else unanswered, the minute's count at the rung) proves the limit is higher."""
        assert self._rung is not None
        count = self._windows.count(self._clock())
        if not self._unanswered and count > self._rung:
            self._rung = next_rung(count)

    def _climb_allows(self) -> bool:
        """Below the rung: go. At it: one probe alone (past the rung), once everything sent has
        been answered; its answer proves the limit is above the rung, or names it."""
        assert self._rung is not None
        return self._windows.count(self._clock()) < self._rung or not self._unanswered

    def _learn(self, reported_rpm: float, reported_qps: float | None) -> None:
        if self._rung is not None:
            # Leaving the climb: the minute window counts what the climb sent, so what is spent
            # stays spent, and no burst goes on top of it; the pace starts now, with no sends
            # owed from while the climb held everyone.
            self._rung = None
            self._rate_per_minute = reported_rpm
            self._released_at = self._clock()
        if reported_qps is not None and reported_qps < reported_rpm / 60.0 - QPS_ROUNDING:
            self._learned_qps = reported_qps
        self._learned = reported_rpm
        ceiling = min(limit for limit in (self._configured, self._learned) if limit)
        if ceiling == self._ceiling:
            return
        self._ceiling = ceiling
        if self._rate_per_minute is None or self._rate_per_minute > ceiling:
            self._rate_per_minute = ceiling
        # A rate below a raised ceiling (after a 429) climbs back in _recover, not in one jump.

    def _decrease(self) -> None:
        now = self._clock()
        if now - self._last_decrease < 1.0:
            return  # one 429 burst is one signal, not one halving per in-flight request
        self._last_decrease = now
        current = self._rate_per_minute
        if current is None:
            # Open limiter and a 429 with no hint at all: assume the highest published plan.
            current = OPEN_BUCKET_FALLBACK_RPM
            self._ceiling = current
        self._rate_per_minute = max(1.0, current * DECREASE_FACTOR)

    def _recover(self) -> None:
        if self._rate_per_minute is None or self._ceiling is None or self._rate_per_minute >= self._ceiling:
            return
        elapsed = self._clock() - max(self._last_decrease, self._paused_until)
        if elapsed > 1.0:
            step = self._ceiling * RECOVERY_PER_SECOND * min(elapsed, 5.0)
            self._last_decrease = self._clock()
            self._rate_per_minute = min(self._ceiling, self._rate_per_minute + step)

    def _pause(self, seconds: float) -> None:
        until = self._clock() + min(seconds, MAX_SERVER_WAIT_SECONDS)
        if until > self._paused_until:
            self._paused_until = until
            self.pauses += 1
        pace = self._per_second()
        if pace is not None:  # after the pause: one at a time at the pace, no burst
            self._windows.ramp_from(self._paused_until, pace, self._burst)

    def _hold(self, seconds: float) -> None:
        """Nobody goes for ``seconds``; unlike ``_pause`` the held second's sends may catch up."""
        until = self._clock() + seconds
        if until > self._paused_until:
            self._paused_until = until
            self._held_seconds = (
                max(self._held_seconds, seconds) if self._clock() < self._held_catch_up_until else seconds
            )
            self._held_catch_up_until = until + 1.0

    def _cap_to_remaining(self, remaining: float, reset: float | None) -> None:
        """The server's count is the truth: until its reset, send no more than the requests it
        still admits, less those already on their way (it counted the answered one, not them)."""
        self._room = remaining - len(self._unanswered)
        self._room_until = self._clock() + (reset if reset is not None else DEFAULT_PAUSE_SECONDS)

    # -- admission ------------------------------------------------------------------------------

    def _due(self, now: float) -> float:
        """Since when the windows and the gateway's remaining count admit a send (-inf: nothing
        holds it); a send is admitted once this is not after now."""
        due = max(self._released_at, self._windows.due(now, self._ceiling, self._per_second(), self._burst))
        if self._room is not None:
            if now >= self._room_until:
                self._room = None  # the count is stale: the window has moved on since
            elif self._room < 1.0:
                due = max(due, self._room_until)
        return due

    def _take_token(self) -> bool:
        now = self._clock()
        if now < self._paused_until:
            return False
        if self._rung is not None:
            self._admitted_since = -math.inf
            return self._climb_allows()
        self._admitted_since = self._due(now)
        return self._admitted_since <= now

    def _granted(self, lane: Lane, waited: bool) -> None:
        """Note a send; ``waited``: it was queued, so it went when the dispatcher woke, which on a
        busy event loop is a little after it was admitted (made up, see SendWindows.record)."""
        self.granted[lane] += 1
        now = self._clock()
        catch_up = CATCH_UP_SECONDS
        if now <= self._held_catch_up_until:
            catch_up += self._held_seconds  # the sends due during a hold go when it ends
        self._windows.record(now, self._admitted_since if waited else -math.inf, catch_up)
        if self._room is not None:
            self._room -= 1.0
        self._unanswered.append(now)
        while self._unanswered and self._unanswered[0] < now - UNANSWERED_TTL_SECONDS:
            self._unanswered.popleft()

    def _seconds_until_token(self) -> float:
        now = self._clock()
        if now < self._paused_until:
            return self._paused_until - now
        if self._rung is not None:
            return PROBE_RECHECK_SECONDS  # waiting for an answer, or for the minute to move on
        return max(0.0, self._due(now) - now)

    @property
    def unanswered(self) -> int:
        return len(self._unanswered)

    # -- the dispatcher: hands sends to waiters, fairest lane first -----------------------------

    def _start_dispatcher(self) -> None:
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())

    def _next_lane(self) -> Lane | None:
        for queue in self._queues.values():
            while queue and queue[0].done():  # a cancelled waiter gives up its place
                queue.popleft()
        waiting = [lane for lane, queue in self._queues.items() if queue]
        if not waiting:
            return None
        return min(waiting, key=lambda lane: self._virtual_time[lane])

    def _grant_ready(self) -> Lane | None:
        """Let every send go that may go now; return the lane still waiting, if any."""
        while (lane := self._next_lane()) is not None:
            if not self._take_token():
                return lane
            self._queues[lane].popleft().set_result(None)
            self._granted(lane, waited=True)
            self._virtual_time[lane] += 1.0 / self._shares[lane]
        return None

    async def _dispatch(self) -> None:
        while self._grant_ready() is not None:
            await self._sleep(max(self._seconds_until_token(), 0.0005))

    async def aclose(self) -> None:
        """Stop the dispatcher (it ends by itself once nobody waits; this is for early shutdown)."""
        if self._dispatcher is not None and not self._dispatcher.done():
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
