"""Gateway client fixtures: clients on the in-process emulator that never sleep, and a limiter
that records what the client told it."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from gateway_support import BASE_URL, FAULT_HEADER, ClientFactory, RecordingLimiter, ServedEmulator, SleepLog
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
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


@pytest.fixture
def served_emulator() -> Iterator[ServedEmulator]:
    """The emulator on a loopback socket (uvicorn in a thread of this process, stopped after the
    test): needed where ASGI cannot stand in, i.e. read timeouts and the aiohttp transport."""
    config = load_config().model_copy(
        update={"media": {"padding": {"first_seconds": 0.15, "interval_seconds": 0.15, "chunk": " \n"}}}
    )
    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="served-emulator", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the emulator did not start on loopback")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield ServedEmulator(f"http://127.0.0.1:{port}", app)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
