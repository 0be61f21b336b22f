"""The padding of long non-streaming image requests: whitespace chunks, then the JSON document.

Timings are fractions of a second; the assertions are about what was written, never how long it took.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from relaybatch.emulator.media.image_route import UPSTREAM_LATENCY_HEADER
from tests.emulator.emulator_http import AppFactory, bearer

ROUTE = "/v1/images/generations"
BODY = {"model": "relay-image-2", "prompt": "a slow lighthouse"}
TINY_PADDING = {"first_seconds": 0.05, "interval_seconds": 0.05}


async def raw_chunks(app: Starlette, headers: dict[str, str], body: dict[str, object] = BODY) -> list[bytes]:
    """The body as the app wrote it, one entry per ASGI body message."""
    messages: list[bytes] = []
    payload = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": ROUTE,
        "raw_path": ROUTE.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        + [(b"content-type", b"application/json"), (b"host", b"emulator.local")],
        "client": ("127.0.0.1", 1),
        "server": ("emulator.local", 80),
    }
    sent = False

    async def receive() -> dict[str, object]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        # The client stays connected until the answer is complete (a disconnect stops streaming).
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            body_bytes = message["body"]
            assert isinstance(body_bytes, bytes)
            messages.append(body_bytes)

    await app(scope, receive, send)
    return messages


@pytest.fixture
async def padded_http(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app({"padding": TINY_PADDING})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as client:
        yield client


async def test_slow_upstream_pads_with_whitespace_then_json(padded_http: httpx.AsyncClient) -> None:
    headers = {**bearer(), UPSTREAM_LATENCY_HEADER: "0.4"}
    response = await padded_http.post(ROUTE, headers=headers, json=BODY)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.content[:1] == b"\n"  # the first byte is not "{"
    padding, _document = response.content.split(b"{", 1)
    assert padding.strip() == b""
    assert json.loads(response.content)["data"][0]["b64_json"]


async def test_padding_arrives_in_separate_chunks_before_the_body(make_app: AppFactory) -> None:
    app = make_app({"padding": TINY_PADDING})
    chunks = await raw_chunks(app, {**bearer(), UPSTREAM_LATENCY_HEADER: "0.4"})
    assert len(chunks) >= 2
    assert all(chunk == b"\n" for chunk in chunks[:-1])
    assert json.loads(chunks[-1])["size"] == "1024x1024"


async def test_fast_upstream_writes_no_padding(padded_http: httpx.AsyncClient) -> None:
    response = await padded_http.post(ROUTE, headers=bearer(), json=BODY)
    assert response.status_code == 200
    assert response.content[:1] == b"{"


async def test_latency_below_the_first_gap_writes_no_padding(make_app: AppFactory) -> None:
    app = make_app({"padding": {"first_seconds": 30, "interval_seconds": 30}})
    chunks = await raw_chunks(app, {**bearer(), UPSTREAM_LATENCY_HEADER: "0.05"})
    assert b"".join(chunks)[:1] == b"{"


async def test_config_latency_applies_without_a_header(make_app: AppFactory) -> None:
    app = make_app({"padding": TINY_PADDING, "images": {"upstream_seconds": 0.3}})
    chunks = await raw_chunks(app, bearer())
    assert chunks[0] == b"\n"
    assert json.loads(b"".join(chunks))["quality"] == "medium"


async def test_model_option_latency_applies(make_app: AppFactory) -> None:
    app = make_app({"padding": TINY_PADDING})
    app.state.emulator.models["relay-image-2"].options["upstream_seconds"] = 0.3
    chunks = await raw_chunks(app, bearer())
    assert chunks[0] == b"\n"


async def test_bad_latency_header_is_400(padded_http: httpx.AsyncClient) -> None:
    response = await padded_http.post(ROUTE, headers={**bearer(), UPSTREAM_LATENCY_HEADER: "soon"}, json=BODY)
    assert response.status_code == 400


def test_padding_settings_are_validated() -> None:
    from relaybatch.emulator.route_settings import parse_route_settings
    from relaybatch.errors import UserError

    assert parse_route_settings({}).padding.first_seconds == 90
    assert parse_route_settings({}).padding.interval_seconds == 30
    with pytest.raises(UserError, match=r"media\.padding\.first_seconds"):
        parse_route_settings({"padding": {"first_seconds": 0}})
    with pytest.raises(UserError, match=r"media\.padding\.chunk"):
        parse_route_settings({"padding": {"chunk": "x"}})
