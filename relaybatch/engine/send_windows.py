"""When the next request may go: the send times of the last requests, counted in trailing windows.

The gateway states its limit per minute (``x-ratelimit-limit-requests``, ``error.rate_limit.rpm``)
and per second (``error.rate_limit.qps``, "about" rpm / 60), and does not say how it counts. A
sliding 60 s window is the strictest reading of the minute (any fixed minute is one of its
windows), so the client counts its own sends the same way, over a slightly longer window:

- the minute: fewer than ``per_minute`` sends in the trailing ``60 + margin`` seconds. A request
  reaches the gateway 0 to ``margin`` seconds after it is sent (the network, a busy event loop),
  so any 60 s of arrivals come from sends inside some ``60 + margin`` s: a gateway counting any
  60 s window, sliding or fixed, never sees more than the limit while the jitter stays within
  the margin. Over a long run this uses ``60 / (60 + margin)`` of the limit (99.2 % at 0.5 s),
  over the first two minutes about 99.6 %: unlike a rate discounted by a safety factor, the
  discount is paid once per minute, as a short wait, and only while the limit binds.
- the second: at most ``burst`` sends in any ``burst / per_second`` seconds, ``burst`` being half
  a second's allowance (``floor(qps / 2)``, at least 1). The pace is exactly the limit's; a send
  that goes late because the event loop was busy counts as sent on time (up to 0.1 s), so the
  run keeps to its timetable instead of losing the lateness for good. A gateway metering seconds
  with a token bucket refilled at qps and a second of capacity then admits every request while
  arrivals are jittered by up to half a second (the other half of its capacity), the same
  tolerance as the minute's margin (lateness counts as jitter); a strict one-second
  window of qps requests admits them all when arrivals are not jittered across second
  boundaries. No client can use a strict per-second window fully under arrival jitter, so the
  margin is spent on the minute, where it costs 1 %, not on the second, where it would cost the
  jitter's share of every second.

After a pause (a spent window) the next sends are spaced at the pace rather than bunched
(``ramp_from``): the gateway has one slot free at its reset, not a second's worth.

When the gateway is seen to admit larger bursts (``allow_bursts``: the cold-start climb sent a
rung at full speed and only its probe was refused), the per-second rule becomes a token bucket of
that size refilled at the pace: time the minute window kept the run below the pace is saved, and
the run catches up as the window frees (a count per second could never send more than the pace).
"""

from __future__ import annotations

import math
from collections import deque

WINDOW_SECONDS = 60.0
# Arrivals may be this much later than their sends relative to each other (network and event-loop
# jitter): the minute window is counted over 60 s plus this. benchmarks/cold_start.py --jitter.
JITTER_MARGIN_SECONDS = 0.5
# Sends allowed together: this many seconds' worth at the pace (see the docstring).
BURST_SECONDS = 0.5
# A send that goes up to this late (the event loop was busy when the rule opened) counts as sent
# on time, so lateness is not lost for good: measured on a loaded 2-core machine, wakes 1-10 ms
# late twice a second cost 0.5-1 % of the limit. Later than this it counts as sent when it went.
CATCH_UP_SECONDS = 0.1


def burst_size(per_second: float, burst: float | None = None) -> int:
    """Sends allowed together: the configured burst, else half a second's allowance."""
    if burst is not None:
        return max(1, math.floor(burst))
    return max(1, math.floor(per_second * BURST_SECONDS + 1e-9))


class SendWindows:
    """The send times of recent requests and the two trailing counts that admit the next one.

    Pure bookkeeping on times handed in (no clock, no waiting): ``next_send_at`` says when a send
    may go, ``record`` notes one that went.
    """

    def __init__(self, margin: float = JITTER_MARGIN_SECONDS) -> None:
        self.margin = margin
        self.span = WINDOW_SECONDS + margin
        self._minute: deque[float] = deque()  # every send in the trailing span, oldest first
        # The last sends for the per-second rule, each at the time the rule let it go: a send that
        # went late (a busy event loop) does not push every later one back by as much.
        self._second: deque[float] = deque()
        self._opened_at: float | None = None  # when the per-second rule let the next send go
        # The per-second rule as a token bucket, once bursts of this size are known to pass.
        self._bucket_size: int | None = None
        self._tokens = 0.0
        self._tokens_at = 0.0

    def record(self, at: float, waited: bool = False) -> None:
        """Note a send at ``at``; ``waited``: it was queued for the rule to open, so it counts as
        sent when the rule opened if it went at most CATCH_UP_SECONDS later (an idle run's next
        send counts as sent when it went: no saving up)."""
        self._minute.append(at)
        on_schedule = at
        if waited and self._opened_at is not None:
            on_schedule = min(at, max(self._opened_at, at - CATCH_UP_SECONDS))
        self._second.append(max(on_schedule, self._second[-1]) if self._second else on_schedule)
        self._tokens -= 1.0  # refilled up to ``at`` by the question that let this send go

    def allow_bursts(self, size: int, now: float) -> None:
        """The gateway admitted ``size`` sends within a second: from ``now`` on the per-second
        rule saves unused time at the pace, up to ``size`` sends."""
        self._bucket_size = max(1, size)
        self._tokens, self._tokens_at = 0.0, now

    def count(self, now: float) -> int:
        """Sends in the trailing ``60 + margin`` seconds."""
        horizon = now - self.span
        while self._minute and self._minute[0] <= horizon:
            self._minute.popleft()
        return len(self._minute)

    def densest(self, seconds: float) -> int:
        """The most sends inside any ``seconds`` of the trailing window."""
        most, first = 0, 0
        for last, at in enumerate(self._minute):
            while self._minute[first] <= at - seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def minute_allows_at(self, now: float, per_minute: float) -> float:
        """The earliest time (>= now) the minute window has room for one more send."""
        over = self.count(now) - math.ceil(per_minute) + 1
        if over <= 0:
            return now
        # The over-th oldest send has to leave the window first.
        return self._minute[over - 1] + self.span

    def second_allows_at(self, now: float, per_second: float, burst: float | None = None) -> float:
        """The earliest time (>= now) the per-second rule lets one more send go."""
        if self._bucket_size is not None:
            if now > self._tokens_at:
                earned = (now - self._tokens_at) * per_second
                self._tokens = min(float(self._bucket_size), self._tokens + earned)
                self._tokens_at = now
            if self._tokens >= 1.0:
                return max(now, self._tokens_at)
            return self._tokens_at + (1.0 - self._tokens) / per_second
        size = burst_size(per_second, burst)
        while len(self._second) > size:
            self._second.popleft()
        if len(self._second) < size:
            self._opened_at = None
            return now
        self._opened_at = self._second[0] + size / per_second
        return max(now, self._opened_at)

    def next_send_at(
        self, now: float, per_minute: float | None, per_second: float | None, burst: float | None = None
    ) -> float:
        """The earliest time (>= now) both rules admit a send; ``None`` limits are not applied."""
        at = now
        if per_minute is not None:
            at = max(at, self.minute_allows_at(now, per_minute))
        if per_second is not None and per_second > 0:
            at = max(at, self.second_allows_at(now, per_second, burst))
        return at

    def ramp_from(self, start: float, per_second: float, burst: float | None = None) -> None:
        """From ``start`` on, one send per ``1 / per_second``, as if the last sends had been paced
        up to then: no burst right after a pause."""
        if self._bucket_size is not None:
            self._tokens, self._tokens_at = 1.0, start
            return
        size = burst_size(per_second, burst)
        step = 1.0 / per_second
        self._second = deque(start - (size - index) * step for index in range(size))
        self._opened_at = None
