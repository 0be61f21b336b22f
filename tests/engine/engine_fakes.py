"""Engine test doubles: a fake clock whose sleep moves time forward at once, fast settings, and
one budgeted execution on an emulator app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal

import httpx
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.cost_model import Budgets
from relaybatch.costs import spend_guard_for_run
from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    EngineSettings,
    PollSettings,
    RunSummary,
    execute,
)
from relaybatch.engine.progress import ProgressReporter
from relaybatch.engine.spend import SpendGuard
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


async def execute_with_a_budget(
    store: CheckpointStore,
    app: Starlette,
    bucket: AdaptiveTokenBucket,
    progress: ProgressReporter,
    watch_spend: Callable[[SpendGuard], SpendGuard] = lambda guard: guard,
    settings: EngineSettings = FAST,
) -> RunSummary:
    """One execution on ``app`` as the standard account, as a run does it: the bucket as limiter,
    no client retries (the engine's show), a 5 USD run budget and ``progress`` reporting."""
    async with (
        GatewayClient(
            "http://emulator.local",
            SecretStr("rb-standard-key"),
            transport=httpx.ASGITransport(app=app),
            limiter=bucket,
            retry=RetryPolicy(max_attempts=1),
        ) as client,
        spend_guard_for_run(store, client, budgets=Budgets(run_usd=Decimal("5"))) as guard,
    ):
        return await execute(
            store, client, settings=settings, limiter=bucket, spend=watch_spend(guard), progress=progress
        )
