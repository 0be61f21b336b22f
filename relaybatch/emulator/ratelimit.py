"""One sliding 60-second request window per account, over every route (polls included).

The window reads the emulator clock, so tests move time with POST /_emulator/clock/advance while
a served emulator runs on real time. Requests turned away with 429 do not take a slot.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

WINDOW_SECONDS = 60.0


@dataclass(slots=True)
class WindowReport:
    allowed: bool
    limit_rpm: int
    remaining: int
    # Seconds until the oldest request in the window leaves it (a slot frees).
    reset_seconds: float

    def headers(self) -> dict[str, str]:
        """The x-ratelimit-* headers every response of a rate-limited account carries."""
        headers = {
            "x-ratelimit-limit-requests": str(self.limit_rpm),
            "x-ratelimit-remaining-requests": str(self.remaining),
            # Rounded up to the millisecond: a client that waits exactly this long must find the
            # slot free (rounded to nearest, it could come back a fraction of a millisecond early).
            "x-ratelimit-reset-requests": f"{math.ceil(self.reset_seconds * 1000) / 1000:.3f}s",
        }
        if not self.allowed:
            headers["retry-after"] = str(max(1, math.ceil(self.reset_seconds)))
        return headers

    def body(self) -> dict[str, float | int]:
        """The 429 body's error.rate_limit: requests per minute and the per-second equivalent."""
        return rate_limit_body(self.limit_rpm)


def rate_limit_body(rpm: int) -> dict[str, float | int]:
    return {"rpm": rpm, "qps": round(rpm / 60, 2)}


class RateLimiter:
    """Sliding-window request counts per account name."""

    def __init__(self) -> None:
        self._windows: dict[str, deque[float]] = {}

    def admit(self, account: str, limit_rpm: int, now: float) -> WindowReport:
        """Take a slot for one request if the window has one; report the window either way."""
        window = self._windows.setdefault(account, deque())
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        allowed = len(window) < limit_rpm
        if allowed:
            window.append(now)
        reset = window[0] + WINDOW_SECONDS - now if window else 0.0
        return WindowReport(allowed, limit_rpm, max(0, limit_rpm - len(window)), max(0.0, reset))
