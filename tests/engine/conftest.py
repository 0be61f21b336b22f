"""Engine test fixtures: a fast emulator (media finish in a fraction of a second) and clients on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_fakes import FakeClock
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
from relaybatch.engine import CheckpointStore, EngineSettings, PollSettings
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY

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
    retry_base_seconds=0.001,
    retry_max_seconds=0.01,
    poll=PollSettings(initial_seconds=0.02, max_seconds=0.05),
)

ClientFactory = Callable[..., GatewayClient]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fast_app() -> Starlette:
    config = load_config()
    config.media = FAST_MEDIA
    return create_app(config)


@pytest.fixture
async def make_client(fast_app: Starlette) -> AsyncIterator[ClientFactory]:
    """Clients on the fast emulator; the client's own retries are off so the engine's show."""
    opened: list[GatewayClient] = []

    def factory(key: str = EMULATOR_DEMO_KEY, **options: Any) -> GatewayClient:
        options.setdefault("retry", RetryPolicy(max_attempts=1))
        client = GatewayClient(
            "http://emulator.local", SecretStr(key), transport=httpx.ASGITransport(app=fast_app), **options
        )
        opened.append(client)
        return client

    yield factory
    for client in opened:
        await client.aclose()


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    checkpoint = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    yield checkpoint  # type: ignore[misc]
    checkpoint.close()
