"""The limiter interface every gateway request passes through.

The client calls ``acquire`` before each request (polls included) and ``observe`` after each
answer, or ``no_answer`` when none came (never connected, dropped), so one limiter shared by a
whole run sees all traffic and can slow everybody down on a 429. Implementations: ``Unlimited``
here; the shared token bucket lives with the engine.
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
