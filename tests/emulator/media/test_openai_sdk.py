"""The official openai SDK against the emulator: images (padding included) and the videos resource
as the SDK sends it (multipart form data to {base_url}/videos, base_url=<gateway>/v2)."""

from __future__ import annotations

import base64
import io
from decimal import Decimal

import httpx
import httpx2
import pytest
from openai import AsyncOpenAI, NotFoundError
from PIL import Image
from starlette.applications import Starlette

from relaybatch.emulator.media.image_route import UPSTREAM_LATENCY_HEADER
from relaybatch.emulator.state import EmulatorState
from tests.emulator.codecs.mp4_checks import check_mp4
from tests.emulator.emulator_http import AppFactory, charges

BASE = "http://emulator.local"


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


# Every method of the SDK's videos resource carries a deprecation notice about the public service.
SORA_NOTICE = "ignore:The Sora API:DeprecationWarning"


def openai_videos_client(app: Starlette, base_path: str = "/v2") -> AsyncOpenAI:
    # openai 3.x runs on httpx2; the videos resource needs base_url=<gateway>/v2 (interface path).
    http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=BASE)
    return AsyncOpenAI(
        api_key="rb-demo-key", base_url=BASE + base_path, http_client=http_client, max_retries=0
    )


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), "blue").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.filterwarnings(SORA_NOTICE)
async def test_openai_sdk_videos_create_retrieve_download_delete(
    app: Starlette, state: EmulatorState
) -> None:
    async with openai_videos_client(app) as client:
        video = await client.videos.create(
            model="relay-video-2", prompt="a lighthouse", seconds="8", size="1280x720"
        )
        assert (video.status, video.seconds, video.size) == ("queued", "8", "1280x720")
        with_frame = await client.videos.create(
            model="relay-video-2-pro",
            prompt="a lighthouse",
            input_reference=("frame.png", png_bytes(), "image/png"),
            extra_body={"audio": True},
        )
        state.clock.advance(60)
        done = await client.videos.retrieve(video.id)
        content = await client.videos.download_content(video.id)
        thumbnail = await client.videos.download_content(video.id, variant="thumbnail")
        deleted = await client.videos.delete(video.id)
        with pytest.raises(NotFoundError):
            await client.videos.retrieve(video.id)
    assert (done.status, done.progress, done.completed_at is not None) == ("completed", 100, True)
    assert check_mp4(content.read())["duration_ms"] == 8000
    assert Image.open(io.BytesIO(thumbnail.read())).format == "WEBP"
    assert deleted.deleted and deleted.id == video.id
    quotes = [(c.model, c.usd) for c in charges(state, "/v2/videos")]
    assert quotes == [("relay-video-2", Decimal("0.80")), ("relay-video-2-pro", Decimal("2.00"))]
    assert with_frame.status == "queued"


@pytest.mark.filterwarnings(SORA_NOTICE)
async def test_openai_sdk_videos_create_and_poll(make_app: AppFactory) -> None:
    instant = {"queued_seconds": 0, "render_seconds_base": 0, "render_seconds_per_video_second": 0}
    app = make_app({"video": instant})
    async with openai_videos_client(app) as client:
        video = await client.videos.create_and_poll(model="relay-video-2", prompt="rain", poll_interval_ms=1)
    assert video.status == "completed"


@pytest.mark.filterwarnings(SORA_NOTICE)
async def test_openai_sdk_videos_on_the_chat_base_says_where_video_is(app: Starlette) -> None:
    async with openai_videos_client(app, base_path="/v1") as client:
        with pytest.raises(NotFoundError, match="/v2/videos"):
            await client.videos.create(model="relay-video-2", prompt="rain")
