"""The official openai SDK generates images against the emulator, padding included."""

from __future__ import annotations

import base64

import httpx
from openai import AsyncOpenAI

from relaybatch.emulator.media.image_route import UPSTREAM_LATENCY_HEADER
from tests.emulator.emulator_http import AppFactory


async def test_openai_sdk_images_generate_through_padding(make_app: AppFactory) -> None:
    app = make_app({"padding": {"first_seconds": 0.05, "interval_seconds": 0.05}})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http_client:
        client = AsyncOpenAI(
            api_key="rb-demo-key", base_url="http://emulator.local/v1", http_client=http_client, max_retries=0
        )
        result = await client.images.generate(
            model="relay-image-2",
            prompt="a harbour at night",
            size="1024x1536",
            quality="low",
            output_format="jpeg",
            n=2,
            extra_headers={UPSTREAM_LATENCY_HEADER: "0.2"},
        )
    assert result.data is not None and len(result.data) == 2
    assert base64.b64decode(result.data[0].b64_json or "")[:3] == b"\xff\xd8\xff"
    assert (result.size, result.quality, result.output_format) == ("1024x1536", "low", "jpeg")
    assert result.usage is not None and result.usage.output_tokens_details is not None
    assert result.usage.output_tokens_details.image_tokens == 2 * 408
