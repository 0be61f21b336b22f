"""Engine test doubles: a fake clock whose sleep moves time forward at once."""

from __future__ import annotations

import asyncio


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
