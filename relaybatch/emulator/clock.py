"""The emulator's clock: real time plus an offset that POST /_emulator/clock/advance moves.

Everything time-driven (rate-limit windows, video and task progress, ledger timestamps) reads
this clock, so a test jumps a minute ahead instead of sleeping one. ``Clock(start=...)`` freezes
time at ``start`` so that only ``advance`` moves it.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

# The last second a timestamp can show (9999-12-31T23:59:59Z): the clock never moves past it.
LATEST_EPOCH_SECONDS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, start: float | None = None) -> None:
        self._frozen = start
        self._offset = 0.0

    def now(self) -> float:
        """Seconds since the Unix epoch, as this emulator sees them."""
        base = self._frozen if self._frozen is not None else time.time()
        return base + self._offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward; ValueError (clock unchanged) for a negative or non-finite step,
        or one that would pass the last time a timestamp can show."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("the clock only moves forward, by a finite number of seconds")
        if self.now() + seconds > LATEST_EPOCH_SECONDS:
            raise ValueError("the clock cannot move past 9999-12-31T23:59:59Z")
        self._offset += seconds

    def isoformat(self) -> str:
        """RFC 3339 UTC timestamp of now, e.g. ``2026-11-22T03:00:00Z``."""
        return rfc3339(self.now())


def rfc3339(epoch_seconds: float) -> str:
    moment = datetime.fromtimestamp(epoch_seconds, UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")
