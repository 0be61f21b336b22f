"""Helpers for the gateway client tests: a recording limiter, a sleep that never waits, and
access to the emulator's admin API and request log."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette

from relaybatch.gateway import GatewayClient
from relaybatch.limiting import RequestPurpose

BASE_URL = "http://emulator.local"
FAULT_HEADER = "x-emulator-fault"
# The smallest chat completion that validates, for tests that answer from a fake server.
CHAT_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}

# make_client(key=..., fault=..., retry=...) -> async context manager of a GatewayClient
ClientFactory = Callable[..., AbstractAsyncContextManager[GatewayClient]]


@dataclass(frozen=True)
class ServedEmulator:
    base_url: str
    app: Starlette


class RecordingLimiter:
    """Keeps every acquire and observe call, in order, so tests can check the client used it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def acquire(self, purpose: RequestPurpose = "submit") -> None:
        self.events.append(("acquire", purpose))

    def observe(
        self, status: int, headers: Mapping[str, str], rate_limit: Mapping[str, Any] | None = None
    ) -> None:
        self.events.append(("observe", (status, rate_limit)))

    def no_answer(self) -> None:
        self.events.append(("no_answer", None))

    @property
    def acquires(self) -> list[Any]:
        return [value for kind, value in self.events if kind == "acquire"]

    @property
    def observed(self) -> list[Any]:
        return [value for kind, value in self.events if kind == "observe"]


class SleepLog:
    """An injected sleep that returns at once and remembers each requested delay."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def schedule_faults(app: Starlette, *rules: dict[str, Any]) -> None:
    """Install fault rules through the emulator's admin API (PUT /_emulator/faults)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as admin:
        response = await admin.put("/_emulator/faults", json={"rules": list(rules)})
        response.raise_for_status()


def request_count(app: Starlette, method: str, path: str) -> int:
    """How many times the emulator's request log saw this method and path."""
    return int(app.state.emulator.request_count(method, path))


def served_paths(app: Starlette) -> set[str]:
    return {getattr(route, "path", "") for route in app.routes}


def require_route(app: Starlette, path: str) -> None:
    """Skip (saying so) when the emulator does not serve this route yet; it is built in parallel."""
    import pytest
    from starlette.routing import Match

    scope = {"type": "http", "path": path, "method": "GET", "root_path": ""}
    for route in app.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            return
    pytest.skip(f"the emulator does not serve {path} yet")
