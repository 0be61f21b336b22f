"""Request helpers for the emulator conformance suite: the auth headers of each family, small bodies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorState

DEMO_KEY = "rb-demo-key"
OTHER_KEY = "rb-standard-key"  # a second account, for "another account's id" checks
EMPTY_KEY = "rb-empty-key"  # balance 0: every billed call is refused
REVOKED_KEY = "rb-revoked-key"
RESTRICTED_KEY = "rb-restricted-key"  # may call chat models only
# A fixed start, so rate-limit windows and timestamps only move when a test advances the clock.
START = 1_800_000_000.0

# make_app(media=None) -> a fresh app from the shipped config (tests/emulator/conftest.py).
AppFactory = Callable[..., Starlette]


def bearer(key: str = DEMO_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def anthropic(key: str = DEMO_KEY) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


def goog(key: str = DEMO_KEY) -> dict[str, str]:
    return {"x-goog-api-key": key}


def user_chat(model: str = "relay-chat-small", text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def user_responses(model: str = "relay-chat-small", text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": text, **extra}


def user_messages(model: str = "relay-claude-haiku", text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": text}], **extra}


def user_contents(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def sse_data(body: str) -> list[Any]:
    """The JSON payloads of an SSE body's ``data:`` lines (``[DONE]`` kept as a string)."""
    payloads: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def sse_events(body: str) -> list[str]:
    return [line[len("event: ") :] for line in body.splitlines() if line.startswith("event: ")]


def charges(state: EmulatorState, route: str) -> list[Any]:
    return [charge for charge in state.ledger if charge.route == route]


async def advance(http: httpx.AsyncClient, seconds: float) -> None:
    """Move the emulator's clock forward (its admin route)."""
    response = await http.post("/_emulator/clock/advance", json={"seconds": seconds})
    assert response.status_code == 200, response.text


def assert_refused_for_free(
    response: httpx.Response, state: EmulatorState, route: str, mentions: str
) -> None:
    """A 400 (``invalid_request_error``) whose message names what was wrong, and no charge on ``route``."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and mentions in error["message"], error
    assert charges(state, route) == []
