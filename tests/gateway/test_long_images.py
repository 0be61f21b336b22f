"""Long image requests over a real loopback socket: whitespace padding before the JSON is read
through, and a connection that goes quiet past the read timeout fails with a clear error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from gateway_support import ServedEmulator, request_count
from pydantic import SecretStr

from relaybatch.gateway import (
    ClientTimeouts,
    GatewayClient,
    OutcomeUnknown,
    RetryPolicy,
    StalledConnection,
    aiohttp_transport,
    images_from_result,
)
from relaybatch.settings import EMULATOR_DEMO_KEY

IMAGE = {"model": "relay-image-2", "prompt": "a lighthouse at dusk", "size": "1024x1024", "quality": "low"}
# The served emulator pads every 0.15 s; an upstream answering after 0.6 s gets several chunks.
SLOW_UPSTREAM = {"x-emulator-upstream-latency": "0.6"}
TIMEOUTS = ClientTimeouts(image_read=0.5, read=0.5, padding_interval=0.15)


def _transport(kind: str) -> httpx.AsyncBaseTransport:
    return aiohttp_transport() if kind == "aiohttp" else httpx.AsyncHTTPTransport()


@asynccontextmanager
async def _client(served: ServedEmulator, kind: str, **options: Any) -> AsyncIterator[GatewayClient]:
    options.setdefault("timeouts", TIMEOUTS)
    async with GatewayClient(
        served.base_url, SecretStr(EMULATOR_DEMO_KEY), transport=_transport(kind), **options
    ) as client:
        yield client


async def test_the_emulator_really_pads(served_emulator: ServedEmulator) -> None:
    """Guards the test below: the answer does start with whitespace padding."""
    headers = {"authorization": f"Bearer {EMULATOR_DEMO_KEY}", **SLOW_UPSTREAM}
    async with httpx.AsyncClient(base_url=served_emulator.base_url) as raw:
        response = await raw.post("/v1/images/generations", json=IMAGE, headers=headers)
    assert response.status_code == 200
    assert response.content.startswith(b" \n") and response.content.lstrip().startswith(b"{")


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_padding_before_the_json_is_accepted(served_emulator: ServedEmulator, kind: str) -> None:
    async with _client(served_emulator, kind, headers=SLOW_UPSTREAM) as client:
        result = await client.images_generate(IMAGE)
    [image] = images_from_result(result)
    assert image.media_type == "image/png"
    assert request_count(served_emulator.app, "POST", "/v1/images/generations") == 1


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_a_stalled_image_request_is_a_clear_outcome_unknown(
    served_emulator: ServedEmulator, kind: str
) -> None:
    """No byte for longer than image_read: the create may be running upstream, so it is not resent."""
    async with _client(served_emulator, kind, headers={"x-emulator-fault": "latency=1.5"}) as client:
        with pytest.raises(OutcomeUnknown) as caught:
            await client.images_generate(IMAGE)
    assert isinstance(caught.value.cause, StalledConnection)
    assert "sent nothing for 0.5 s" in str(caught.value)
    assert request_count(served_emulator.app, "POST", "/v1/images/generations") == 1


async def test_a_stalled_read_raises_stalled_connection(served_emulator: ServedEmulator) -> None:
    options = {"headers": {"x-emulator-fault": "latency=1.5"}, "retry": RetryPolicy(max_attempts=1)}
    async with _client(served_emulator, "aiohttp", **options) as client:
        with pytest.raises(StalledConnection, match="read timeout"):
            await client.list_models()


def test_image_read_timeout_must_outlast_the_padding_gap() -> None:
    with pytest.raises(ValueError, match="padding interval"):
        ClientTimeouts(image_read=20)
    assert ClientTimeouts().image_read > 90  # the first padding chunk comes after 90 s of silence
