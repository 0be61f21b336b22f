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
- the second: one send per ``1 / per_second`` seconds (the pace is exactly the limit's), or
  ``burst`` sends per ``burst / per_second`` when a burst is configured. A send that goes late
  because the event loop was busy counts as sent on schedule (up to 0.1 s), so the run keeps to
  its timetable instead of losing the lateness for good. Evenly spaced sends meet a strict
  one-second window of qps requests while arrival jitter stays within one spacing, and a gateway
  metering seconds with a token bucket refilled at qps and a second of capacity while it stays
  within ``1 - 1 / qps`` seconds (0.5 s at 120 rpm, 0.95 s at 1,200; lateness counts as jitter).
  No client can use a strict per-second window fully under larger jitter: the margin is spent on
  the minute, where it costs 1 %, not on the second, where it would cost the jitter's share of
  every second. (Tried and dropped: half-second batches, ``floor(qps / 2)`` sends at once. They
  absorb a late wake without the catch-up rule, but the milliseconds a batch takes to leave put
  up to 29 arrivals in one second at 20 per second, 30 % over a strict per-second window.)

After a pause (a spent window) the next sends are spaced at the pace rather than bunched
(``ramp_from``): the gateway has one slot free at its reset, not a second's worth.

When the gateway is seen to admit larger bursts (``allow_bursts``: the cold-start climb sent a
rung at full speed and only its probe was refused), the per-second rule becomes a token bucket of
that size refilled at the pace: time the minute window kept the run below the pace is saved, and
the run catches up as the window frees (a count per second could never send more than the pace).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterator

WINDOW_SECONDS = 60.0
# Arrivals may be this much later than their sends relative to each other (network and event-loop
# jitter): the minute window is counted over 60 s plus this. benchmarks/cold_start.py --jitter.
JITTER_MARGIN_SECONDS = 0.5
# A send that goes up to this late (the event loop was busy when the rule opened) counts as sent
# on time, so lateness is not lost for good: measured on a loaded 2-core machine, wakes 1-10 ms
# late twice a second cost 0.5-1 % of the limit. Later than this it counts as sent when it went.
CATCH_UP_SECONDS = 0.1
# The per-second rule's send times kept while no larger burst is configured (a limit may be learnt
# at any time, and a burst of up to this many then counts what went before).
SECOND_KEPT = 64


def burst_size(burst: float | None = None) -> int:
    """Sends allowed together: the configured burst, else one."""
    return 1 if burst is None else max(1, math.floor(burst))


class SendTimes:
    """Send times, oldest first, as a queue of C doubles: 8 bytes a send where a deque of floats
    takes about 32. The minute window holds every send of the last ``60 + margin`` seconds: at
    2,400 requests/s that is 145,000 sends, 1.2 MB here against 4.6 MB as Python floats."""

    def __init__(self) -> None:
        self._times = array("d")
        self._first = 0  # times before this index have left

    def __len__(self) -> int:
        return len(self._times) - self._first

    def __getitem__(self, index: int) -> float:
        return self._times[self._first + index]

    def __iter__(self) -> Iterator[float]:
        return iter(self._times[self._first :])

    def append(self, at: float) -> None:
        self._times.append(at)

    def leave_until(self, horizon: float) -> None:
        """Times at or before ``horizon`` leave."""
        times, first = self._times, self._first
        while first < len(times) and times[first] <= horizon:
            first += 1
        if first > 4096 and first * 2 > len(times):  # the left part is most of it: drop it, amortised
            del times[:first]
            first = 0
        self._first = first


class SendWindows:
    """The send times of recent requests and the two trailing counts that admit the next one.

    Pure bookkeeping on times handed in (no clock, no waiting): ``next_send_at`` says when a send
    may go, ``record`` notes one that went.
    """

    def __init__(self, margin: float = JITTER_MARGIN_SECONDS) -> None:
        self.margin = margin
        self.span = WINDOW_SECONDS + margin
        self._minute = SendTimes()  # every send in the trailing span, oldest first
        # The last sends for the per-second rule, each at the time the rule let it go: a send that
        # went late (a busy event loop) does not push every later one back by as much. Bounded
        # whether a limit is known or not: the last SECOND_KEPT, or the largest burst counted with.
        self._second: deque[float] = deque()
        self._second_keep = SECOND_KEPT
        # The per-second rule as a token bucket, once bursts of this size are known to pass.
        self._bucket_size: int | None = None
        self._tokens = 0.0
        self._tokens_at = 0.0

    def record(self, at: float, due: float = -math.inf, catch_up: float = CATCH_UP_SECONDS) -> None:
        """Note a send at ``at`` that the rules (and whatever else held it) admitted since ``due``.
        The per-second rule counts it as sent at ``due`` when it went at most ``catch_up`` later:
        a busy event loop's lateness is made up, not lost. A send nothing held (``due`` -inf, an
        idle run's next request) counts as sent when it went: no saving up."""
        self._minute.append(at)
        self._minute.leave_until(at - self.span)  # kept bounded even while no limit is known
        on_schedule = at if due == -math.inf else min(at, max(due, at - catch_up))
        self._second.append(max(on_schedule, self._second[-1]) if self._second else on_schedule)
        while len(self._second) > self._second_keep:
            self._second.popleft()
        self._tokens -= 1.0  # refilled up to ``at`` by the question that let this send go

    def allow_bursts(self, size: int, now: float) -> None:
        """The gateway admitted ``size`` sends within a second: from ``now`` on the per-second
        rule saves unused time at the pace, up to ``size`` sends."""
        self._bucket_size = max(1, size)
        self._tokens, self._tokens_at = 0.0, now

    def count(self, now: float) -> int:
        """Sends in the trailing ``60 + margin`` seconds."""
        self._minute.leave_until(now - self.span)
        return len(self._minute)

    def held(self) -> int:
        """Send times kept (memory): those of the trailing span and the per-second rule's last."""
        return len(self._minute) + len(self._second)

    def densest(self, seconds: float) -> int:
        """The most sends inside any ``seconds`` of the trailing window."""
        most, first = 0, 0
        for last, at in enumerate(self._minute):
            while self._minute[first] <= at - seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def minute_due(self, now: float, per_minute: float) -> float:
        """Since when the minute window has room for one more send (-inf: it has room anyway)."""
        over = self.count(now) - math.ceil(per_minute) + 1
        if over <= 0:
            return -math.inf
        # The over-th oldest send has to leave the window first.
        return self._minute[over - 1] + self.span

    def second_due(self, now: float, per_second: float, burst: float | None = None) -> float:
        """Since when the per-second rule lets one more send go (-inf: no send constrains it)."""
        if self._bucket_size is not None:
            if now > self._tokens_at:
                earned = (now - self._tokens_at) * per_second
                self._tokens = min(float(self._bucket_size), self._tokens + earned)
                self._tokens_at = now
            if self._tokens >= 1.0:
                return self._tokens_at if self._tokens_at > now else -math.inf
            return self._tokens_at + (1.0 - self._tokens) / per_second
        size = burst_size(burst)
        self._second_keep = max(self._second_keep, size)
        while len(self._second) > size:
            self._second.popleft()
        if len(self._second) < size:
            return -math.inf
        return self._second[0] + size / per_second

    def due(
        self, now: float, per_minute: float | None, per_second: float | None, burst: float | None = None
    ) -> float:
        """Since when both rules admit a send (-inf: neither holds it); ``None`` limits do not apply."""
        due = -math.inf
        if per_minute is not None:
            due = max(due, self.minute_due(now, per_minute))
        if per_second is not None and per_second > 0:
            due = max(due, self.second_due(now, per_second, burst))
        return due

    def next_send_at(
        self, now: float, per_minute: float | None, per_second: float | None, burst: float | None = None
    ) -> float:
        """The earliest time (>= now) both rules admit a send."""
        return max(now, self.due(now, per_minute, per_second, burst))

    def ramp_from(self, start: float, per_second: float, burst: float | None = None) -> None:
        """From ``start`` on, one send per ``1 / per_second``, as if the last sends had been paced
        up to then: no burst right after a pause."""
        if self._bucket_size is not None:
            self._tokens, self._tokens_at = 1.0, start
            return
        size = burst_size(burst)
        self._second_keep = max(self._second_keep, size)
        step = 1.0 / per_second
        self._second = deque(start - (size - index) * step for index in range(size))
