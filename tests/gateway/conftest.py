"""Gateway client fixtures: clients on the in-process emulator that never sleep, and a limiter
that records what the client told it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from gateway_support import BASE_URL, FAULT_HEADER, ClientFactory, RecordingLimiter, SleepLog
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY


@pytest.fixture
def sleeps() -> SleepLog:
    return SleepLog()


@pytest.fixture
def limiter() -> RecordingLimiter:
    return RecordingLimiter()


@pytest.fixture
def make_client(emulator_app: Starlette, sleeps: SleepLog, limiter: RecordingLimiter) -> ClientFactory:
    """``async with make_client(key=..., fault=..., retry=...) as client`` on the test's emulator."""

    @asynccontextmanager
    async def factory(
        *, key: str = EMULATOR_DEMO_KEY, fault: str | None = None, **options: Any
    ) -> AsyncIterator[GatewayClient]:
        options.setdefault("retry", RetryPolicy(max_attempts=4))
        options.setdefault("limiter", limiter)
        options.setdefault("sleep", sleeps)
        options.setdefault("random_fraction", lambda: 0.5)
        headers = {FAULT_HEADER: fault} if fault else None
        transport = options.pop("transport", None) or httpx.ASGITransport(app=emulator_app)
        async with GatewayClient(
            BASE_URL, SecretStr(key), transport=transport, headers=headers, **options
        ) as client:
            yield client

    return factory
