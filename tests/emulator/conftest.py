"""Fixtures for the emulator conformance suite: a fresh app on a frozen clock and a raw HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorConfig, EmulatorState, create_app, load_config
from relaybatch.emulator.clock import Clock

# A fixed start, so rate-limit windows and timestamps only move when a test advances the clock.
START = 1_800_000_000.0


@pytest.fixture(scope="session")
def shipped_config() -> EmulatorConfig:
    """configs/emulator.yaml, read once: an app copies what it changes (balances, fault rules)."""
    return load_config()


@pytest.fixture
def app(shipped_config: EmulatorConfig) -> Starlette:
    return create_app(shipped_config, clock=Clock(start=START))


@pytest.fixture
def state(app: Starlette) -> EmulatorState:
    emulator: EmulatorState = app.state.emulator
    return emulator


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator.test") as client:
        yield client
