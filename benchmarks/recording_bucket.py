"""A run's token bucket that also notes when each request went out and how it was answered."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from relaybatch.engine import AdaptiveTokenBucket


class RecordingBucket(AdaptiveTokenBucket):
    """The run's bucket, also noting when each request went out and how it was answered."""

    def __init__(self, rpm: float | None) -> None:
        super().__init__(rpm)
        self.sent_at: list[float] = []
        self.answers: list[tuple[float, int]] = []  # (when, status)

    async def acquire(self, purpose: Any = "submit") -> None:
        await super().acquire(purpose)
        self.sent_at.append(time.monotonic())

    def observe(
        self, status: int, headers: Mapping[str, str], rate_limit: Mapping[str, Any] | None = None
    ) -> None:
        self.answers.append((time.monotonic(), status))
        super().observe(status, headers, rate_limit)
