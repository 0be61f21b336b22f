"""Engine test doubles: a fake clock whose sleep moves time forward at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from relaybatch.engine import EngineSettings, PollSettings
from relaybatch.gateway import GatewayClient, RetryPolicy


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        # Let woken tasks run at the current time before time moves on.
        for _ in range(3):
            await asyncio.sleep(0)
        self.now += max(0.0, seconds)


FAST_MEDIA = {
    "video": {
        "queued_seconds": 0.05,
        "render_seconds_base": 0.1,
        "render_seconds_per_video_second": 0.0,
        "v1_pending_seconds": 0.05,
        "v1_processing_seconds": 0.1,
    }
}
# Polls every few milliseconds and retries at once: the tests never wait for real back-off.
FAST = EngineSettings(
    concurrency=8,
    retry=RetryPolicy(base_delay=0.001, max_delay=0.01),
    poll=PollSettings(initial_seconds=0.02, max_seconds=0.05),
)

ClientFactory = Callable[..., GatewayClient]
