"""The limiter interface every gateway request passes through.

The client calls ``acquire`` before each request (polls included) and ``observe`` after each
answer, or ``no_answer`` when none came (never connected, dropped), so one limiter shared by a
whole run sees all traffic and can slow everybody down on a 429. Implementations: ``Unlimited``
here; the shared token bucket lives with the engine. ``WatchedLimiter`` is what the engine reads
of the run's limiter besides: the limit in force for progress and the poller's share of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

RequestPurpose = Literal["submit", "poll", "other"]


class Limiter(Protocol):
    async def acquire(self, purpose: RequestPurpose = "submit") -> None:
        """Wait until one request may be sent."""

    def observe(
        self,
        status: int,
        headers: Mapping[str, str],
        rate_limit: Mapping[str, Any] | None = None,
    ) -> None:
        """Learn from an answer: its status, its x-ratelimit-* headers and a 429 body's rate_limit."""

    def no_answer(self) -> None:
        """A granted request ended with no answer (it never connected, or the connection dropped):
        it is no longer on its way, and says nothing about the limit."""


class WatchedLimiter(Limiter, Protocol):
    """The run's limiter as the engine sees it (``engine.AdaptiveTokenBucket``): the client's
    ``Limiter``, and the figures the progress shows and the poller paces itself by."""

    @property
    def requests_per_minute(self) -> float | None:
        """The rate allowed now; None while no limit is known."""

    @property
    def rate_limited(self) -> int:
        """429 answers seen so far."""

    def limit_source(self) -> str:
        """Where the rate comes from (``configured``, ``headers``, ``429``, ``probing``)."""

    def poll_budget_per_second(self) -> float | None:
        """Polls per second guaranteed while submissions also wait; None when unlimited."""


class Unlimited:
    """A limiter that never waits; for one-off calls and tests that measure raw speed."""

    async def acquire(self, purpose: RequestPurpose = "submit") -> None:
        return None

    def observe(
        self,
        status: int,
        headers: Mapping[str, str],
        rate_limit: Mapping[str, Any] | None = None,
    ) -> None:
        return None

    def no_answer(self) -> None:
        return None
