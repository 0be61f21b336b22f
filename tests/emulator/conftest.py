"""Fixtures for the emulator conformance suite: a fresh app on a frozen clock and a raw HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorConfig, EmulatorState, create_app, load_config
from relaybatch.emulator.clock import Clock
from tests.emulator.emulator_http import START, AppFactory


@pytest.fixture(scope="session")
def shipped_config() -> EmulatorConfig:
    """configs/emulator.yaml, read once: an app copies what it changes (balances, fault rules)."""
    return load_config()


@pytest.fixture
def make_app(shipped_config: EmulatorConfig) -> AppFactory:
    """An app from the shipped config, with optional ``media:`` settings, on a frozen clock."""

    def build(media: dict[str, Any] | None = None) -> Starlette:
        # A deep copy: a test may change prices, and the next test must see the shipped ones.
        config = shipped_config.model_copy(deep=True)
        if media is not None:
            config = config.model_copy(update={"media": media})
        return create_app(config, clock=Clock(start=START))

    return build


@pytest.fixture
def app(make_app: AppFactory) -> Starlette:
    return make_app()


@pytest.fixture
def state(app: Starlette) -> EmulatorState:
    emulator: EmulatorState = app.state.emulator
    return emulator


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator.test") as client:
        yield client
