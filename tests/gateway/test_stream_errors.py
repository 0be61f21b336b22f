"""Errors inside a 200 answer: an ``error`` event mid-stream in each family, an error document
behind padding, and a body of the wrong shape. The emulator has no switch for these yet, so a
tiny ASGI app plays the gateway here, speaking each family's public event format."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from gateway_support import ClientFactory
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from relaybatch.gateway import OutcomeUnknown, Overloaded, StreamError, UnexpectedResponse
from relaybatch.gateway.streaming import read_events


def _sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


OVERLOADED = {"type": "overloaded_error", "message": "upstream overloaded"}
FRAMES: dict[str, list[bytes]] = {
    "/v1/chat/completions": [
        _sse(
            {"id": "c1", "model": "m", "created": 1, "choices": [{"index": 0, "delta": {"content": "Hal"}}]}
        ),
        _sse({"error": OVERLOADED}),
    ],
    "/v1/messages": [
        _sse(
            {"type": "message_start", "message": {"id": "m1", "model": "m", "content": [], "usage": {}}},
            "message_start",
        ),
        _sse({"type": "ping"}, "ping"),
        _sse({"type": "error", "error": OVERLOADED}, "error"),
    ],
    "/v1/responses": [
        _sse({"type": "response.created", "response": {"id": "r1", "model": "m"}}, "response.created"),
        _sse(
            {"type": "response.failed", "response": {"id": "r1", "error": {"message": "model crashed"}}},
            "response.failed",
        ),
    ],
    "/v1beta/models/m:streamGenerateContent": [
        _sse({"candidates": [{"content": {"parts": [{"text": "Hal"}]}}]}),
        _sse({"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}),
    ],
    "/v1/typedjudge": [b'{"answers": "not an object"}'],
    "/v1/images/generations": [b"  \n", b" \n", json.dumps({"error": OVERLOADED | {"code": "529"}}).encode()],
}


async def _frames(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for frame in FRAMES[request.url.path]:
            yield frame

    return StreamingResponse(body(), media_type="text/event-stream")


@pytest.fixture
def fake_gateway() -> Starlette:
    return Starlette(routes=[Route(path, _frames, methods=["POST"]) for path in FRAMES])


async def test_chat_error_event(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(StreamError) as caught:
            await client.chat_completions({"model": "m", "messages": []}, stream=True)
    assert caught.value.error_type == "overloaded_error" and caught.value.status == 200


async def test_messages_error_event(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(StreamError, match="upstream overloaded"):
            await client.messages({"model": "m", "messages": [], "max_tokens": 5}, stream=True)


async def test_responses_failed_event(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(StreamError, match="model crashed"):
            await client.responses({"model": "m", "input": "hi"}, stream=True)


async def test_generate_content_error_frame(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(StreamError) as caught:
            await client.generate_content("m", {"contents": []}, stream=True)
    assert caught.value.error_type == "INTERNAL"


async def test_error_document_behind_padding(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    """An image create answered 200, padded, then failed: typed by error.type, outcome unknown."""
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(OutcomeUnknown) as caught:
            await client.images_generate({"model": "m", "prompt": "p"})
    assert isinstance(caught.value.cause, Overloaded)


async def test_answer_of_the_wrong_shape(make_client: ClientFactory, fake_gateway: Starlette) -> None:
    async with make_client(transport=httpx.ASGITransport(app=fake_gateway)) as client:
        with pytest.raises(UnexpectedResponse, match="TypedJudgment"):
            await client.typed_judgment({"model": "m", "state": "s", "questions": {}})


async def test_sse_reader_joins_data_lines_and_skips_comments() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [": keep-alive", "event: note", "data: one", "data: two", "", "data: [DONE]"]:
            yield line

    events = [event async for event in read_events(lines())]
    assert [(event.event, event.data) for event in events] == [("note", "one\ntwo"), (None, "[DONE]")]
