"""Plausible ways a gateway counts its request limit, and a run against one on simulated time.

The interface states a limit per minute and its per-second rate ("about" rpm / 60) and does not
say how the gateway counts them. ``Gateway`` counts one of: a sliding 60 s window (the
emulator's), fixed minutes starting at an arbitrary offset, or either of those plus a per-second
meter (a sliding one-second window of qps requests, or a token bucket refilled at qps with one
second of capacity). ``simulate`` runs workers through a limiter against it on a virtual clock:
requests reach the gateway after a random network delay, are answered after a fixed latency.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from relaybatch.engine import AdaptiveTokenBucket

Kind = Literal["sliding", "fixed", "sliding+second-window", "sliding+second-bucket", "fixed+second-window"]
KINDS: tuple[Kind, ...] = (
    "sliding",
    "fixed",
    "sliding+second-window",
    "sliding+second-bucket",
    "fixed+second-window",
)
Reports = Literal["reported", "only-429", "configured"]


class SimClock:
    """Virtual time for many tasks: time jumps to the next timer once every task is waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.now + max(0.0, seconds), next(self._order), wake))
        await wake

    async def run(self, main: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(main)
        while not task.done():
            for _ in range(40):  # let every ready task run to its next wait
                await asyncio.sleep(0)
            if task.done():
                break
            while self._timers and self._timers[0][2].done():
                heapq.heappop(self._timers)
            if not self._timers:
                raise RuntimeError("every task waits and no timer is set: a deadlock")
            when, _, wake = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            wake.set_result(None)
        task.result()


@dataclass
class Gateway:
    kind: Kind
    rpm: int
    fixed_offset: float = 17.3  # where the gateway's fixed minutes start, on the run's clock
    admitted: deque[float] = field(default_factory=deque)
    minute_counts: dict[int, int] = field(default_factory=dict)
    second: deque[float] = field(default_factory=deque)
    bucket: float = -1.0
    bucket_at: float = 0.0

    @property
    def qps(self) -> float:
        return round(self.rpm / 60, 2)

    def _minute_allows(self, at: float) -> tuple[bool, int, float]:
        """Allowed, remaining after it, seconds to the reset."""
        if self.kind.startswith("fixed"):
            index = math.floor((at - self.fixed_offset) / 60)
            used = self.minute_counts.get(index, 0)
            reset = self.fixed_offset + (index + 1) * 60 - at
            return used < self.rpm, self.rpm - used, reset
        while self.admitted and self.admitted[0] <= at - 60:
            self.admitted.popleft()
        reset = self.admitted[0] + 60 - at if self.admitted else 0.0
        return len(self.admitted) < self.rpm, self.rpm - len(self.admitted), reset

    def _second_allows(self, at: float) -> bool:
        if self.kind.endswith("second-window"):
            while self.second and self.second[0] <= at - 1.0:
                self.second.popleft()
            return len(self.second) < self.qps
        if self.kind.endswith("second-bucket"):
            if self.bucket < 0:
                self.bucket, self.bucket_at = self.qps, at
            self.bucket = min(self.qps, self.bucket + (at - self.bucket_at) * self.qps)
            self.bucket_at = at
            return self.bucket >= 1.0
        return True

    def answer(self, at: float) -> tuple[int, dict[str, str], dict[str, float] | None]:
        """Status, x-ratelimit-* headers and (for a 429) error.rate_limit for a request arriving ``at``."""
        minute_ok, remaining, reset = self._minute_allows(at)
        allowed = minute_ok and self._second_allows(at)
        if allowed:
            remaining -= 1
            if self.kind.startswith("fixed"):
                index = math.floor((at - self.fixed_offset) / 60)
                self.minute_counts[index] = self.minute_counts.get(index, 0) + 1
            else:
                self.admitted.append(at)
                reset = self.admitted[0] + 60 - at
            self.second.append(at)
            self.bucket -= 1.0
        headers = {
            "x-ratelimit-limit-requests": str(self.rpm),
            "x-ratelimit-remaining-requests": str(max(0, remaining)),
            "x-ratelimit-reset-requests": f"{math.ceil(max(0.0, reset) * 1000) / 1000:.3f}s",
        }
        if allowed:
            return 200, headers, None
        if not minute_ok:
            headers["retry-after"] = str(max(1, math.ceil(reset)))
        else:  # the per-second meter refused: a second at most
            headers["retry-after"] = "1"
        return 429, headers, {"rpm": self.rpm, "qps": self.qps}


@dataclass
class Outcome:
    sent: list[float]
    arrivals: list[tuple[float, int]]  # (arrival time, status)
    started: float

    @property
    def refused(self) -> int:
        return sum(1 for _, status in self.arrivals if status == 429)

    def admitted_within(self, seconds: float) -> int:
        """Requests sent in the first ``seconds`` that the gateway admitted."""
        return sum(
            1
            for sent, (_, status) in zip(self.sent, self.arrivals, strict=False)
            if status == 200 and sent - self.started < seconds
        )


async def simulate(
    gateway: Gateway,
    reports: Reports,
    seconds: float,
    clock: SimClock,
    *,
    jitter: float = 0.0,
    latency: float = 0.3,
    workers: int = 64,
    seed: int = 7,
) -> Outcome:
    """Workers send for ``seconds`` of virtual time through a limiter that knows the limit
    (``configured``), reads it from every answer (``reported``), or only from a 429's body and
    Retry-After (``only-429``: no x-ratelimit-* headers)."""
    limiter = AdaptiveTokenBucket(
        gateway.rpm if reports == "configured" else None, clock=clock, sleep=clock.sleep
    )
    rng = random.Random(seed)
    started = clock.now
    sent: list[float] = []
    arrivals: list[tuple[float, int]] = []

    async def one(index: int) -> None:
        await clock.sleep(rng.uniform(0.0, jitter))
        status, headers, body = gateway.answer(clock.now)
        arrivals[index] = (clock.now, status)
        await clock.sleep(latency)
        if reports != "reported":
            headers = {k: v for k, v in headers.items() if not k.startswith("x-ratelimit-")}
        limiter.observe(status, headers, body)

    async def worker() -> None:
        while clock.now - started < seconds:
            await limiter.acquire()
            if clock.now - started >= seconds:
                return
            sent.append(clock.now)
            arrivals.append((math.nan, 0))
            await one(len(sent) - 1)

    async def everything() -> None:
        await asyncio.gather(*(worker() for _ in range(workers)))
        await limiter.aclose()

    await clock.run(everything())
    return Outcome(sent, arrivals, started)


def most_in_any(times: list[float], seconds: float) -> int:
    """The most of ``times`` inside any half-open window (t - seconds, t]."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - seconds:
            first += 1
        most = max(most, last - first + 1)
    return most
