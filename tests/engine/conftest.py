"""Engine test fixtures: a fast emulator (media finish in a fraction of a second) and clients on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_fakes import ClientFactory, FakeClock
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


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
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    checkpoint = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    yield checkpoint
    checkpoint.close()
