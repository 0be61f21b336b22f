"""Every client method against the emulator: media, video V2 and V1 tasks, typed judgment, web
search, catalog and pricing. Chat families are in test_chat_families.py."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from gateway_support import BASE_URL, ClientFactory, RecordingLimiter
from starlette.applications import Starlette

from relaybatch.gateway import (
    TASK_TERMINAL_STATUSES,
    BadRequest,
    InvalidRequest,
    NotFound,
    ReaderResult,
    SearchResult,
    images_from_result,
    inline_media,
)

VIDEO = {"model": "relay-video-2", "prompt": "waves on rocks", "seconds": "4", "size": "720x1280"}


async def advance_clock(app: Starlette, seconds: float) -> None:
    """Move the emulator's clock through its admin API, so queued work finishes."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as admin:
        response = await admin.post("/_emulator/clock/advance", json={"seconds": seconds})
        response.raise_for_status()


async def test_images_decode_to_their_declared_format(make_client: ClientFactory) -> None:
    request = {
        "model": "relay-image-2",
        "prompt": "two boats",
        "n": 2,
        "output_format": "jpeg",
        "quality": "low",
    }
    async with make_client() as client:
        result = await client.images_generate(request)
    images = images_from_result(result)
    assert [image.media_type for image in images] == ["image/jpeg", "image/jpeg"]
    assert all(image.data[:3] == b"\xff\xd8\xff" for image in images)
    assert result.usage is not None and result.usage.output_tokens > 0


async def test_image_rule_violation_is_bad_request(make_client: ClientFactory) -> None:
    request = {"model": "relay-image-2", "prompt": "x", "background": "transparent", "output_format": "jpeg"}
    async with make_client() as client:
        with pytest.raises(BadRequest):
            await client.images_generate(request)


async def test_generate_content_images_and_refusals(make_client: ClientFactory) -> None:
    def ask(prompt: str) -> dict[str, object]:
        return {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}

    async with make_client() as client:
        drawn = await client.generate_content("relay-gemini-image", ask("a red kite"))
        refused = await client.generate_content("relay-gemini-image", ask("emulator:unsafe kite"))
    [image] = inline_media(drawn)
    assert image.media_type == "image/png" and image.data.startswith(b"\x89PNG")
    assert inline_media(refused) == []
    assert refused.candidates[0].finishReason != "STOP" and refused.text


async def test_video_lifecycle_and_download(
    make_client: ClientFactory, emulator_app: Starlette, limiter: RecordingLimiter, tmp_path: Path
) -> None:
    async with make_client() as client:
        created = await client.video_create(VIDEO)
        assert created.status == "queued" and Decimal(created.quote_usd or "0") > 0
        await advance_clock(emulator_app, 600)
        finished = await client.video_get(created.id)
        saved = await client.video_download(created.id, tmp_path / "clip.mp4")
    assert finished.status == "completed"
    assert saved.media_type == "video/mp4" and saved.size == (tmp_path / "clip.mp4").stat().st_size > 0
    assert [path.name for path in tmp_path.iterdir()] == ["clip.mp4"]  # no temporary left behind
    assert limiter.acquires == ["submit", "poll", "other"]


async def test_video_cancel_and_unknown_ids(make_client: ClientFactory) -> None:
    async with make_client() as client:
        created = await client.video_create(VIDEO)
        cancelled = await client.video_delete(created.id)
        with pytest.raises(NotFound):
            await client.video_get("video_does_not_exist")
    assert cancelled.id == created.id
    assert cancelled.deleted or cancelled.status == "cancelled"


async def test_legacy_task_lifecycle(make_client: ClientFactory, emulator_app: Starlette) -> None:
    async with make_client() as client:
        created = await client.video_v1_create({"model": "relay-video-v1", "prompt": "a calm lake"})
        failing = await client.video_v1_create({"model": "relay-video-v1", "prompt": "emulator:fail lake"})
        first = await client.task_get(created.remote_id)
        await advance_clock(emulator_app, 600)
        done = await client.task_get(created.remote_id)
        failed = await client.task_get(failing.remote_id)
        with pytest.raises(NotFound):
            await client.task_get("gen-unknown")
    assert created.remote_id.startswith("gen-")
    assert first.status in ("pending", "processing")
    assert done.status == "completed" and isinstance(done.data, dict) and done.data
    assert failed.status == "failed" and failed.error
    assert {done.status, failed.status} <= TASK_TERMINAL_STATUSES


async def test_typed_judgment_answers(make_client: ClientFactory) -> None:
    questions = {
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        "topic": {
            "type": "choice",
            "instructions": "Topic?",
            "criteria": {"billing": "money", "tech": "bugs"},
        },
        "mood": {"type": "score", "instructions": "Mood", "criteria": ["calm", "annoyed", "furious"]},
    }
    request = {"model": "relay-judge-1", "state": "I was charged twice!", "questions": questions}
    async with make_client() as client:
        judgment = await client.typed_judgment(request)
        with pytest.raises(InvalidRequest):
            await client.typed_judgment(
                {"model": "relay-judge-1", "state": "x", "questions": {"q": {"type": "nope"}}}
            )
    answers = judgment.answers
    assert 0 <= (answers["angry"].noul or -1) <= 1
    assert answers["topic"].choice in ("billing", "tech") and answers["topic"].probabilities
    assert answers["mood"].score is not None and 0 <= answers["mood"].score <= 2
    assert judgment.usage.input_tokens > 0


@pytest.mark.parametrize("route", ["search", "simple-search", "search-news"])
async def test_search_routes(make_client: ClientFactory, route: str) -> None:
    async with make_client() as client:
        result = await client.web_search(route, {"q": "tidal energy"})  # type: ignore[arg-type]
    assert isinstance(result, SearchResult) and result.data.organic
    assert all(hit.link.startswith("https://") for hit in result.data.organic)


async def test_reader_route(make_client: ClientFactory) -> None:
    async with make_client() as client:
        result = await client.web_search("reader", {"url": "https://example.com/a"})
        with pytest.raises(InvalidRequest):
            await client.web_search("crawl", {"q": "x"})  # type: ignore[arg-type]
    assert isinstance(result, ReaderResult) and result.content


async def test_catalog_is_sorted_and_tolerates_unknown_fields(make_client: ClientFactory) -> None:
    async with make_client() as client:
        catalog = await client.list_models()
    ids = [entry.id for entry in catalog.data]
    assert ids == sorted(ids) and catalog.total == len(ids)
    assert "relay-chat-internal" not in ids
    assert {entry.type_target for entry in catalog.data} == {"openai", "anthropic", "gemini"}


async def test_pricing_by_provider_and_mapping(make_client: ClientFactory) -> None:
    async with make_client() as client:
        single = await client.get_pricing("relay-chat-small")
        mirror = await client.get_pricing("relay-chat-mirror")
        mapped = await client.get_pricing("relay-chat-multi", mapping_id=132)
    assert single.data.pricing.text is not None
    assert single.data.pricing.text.prompt == Decimal("0.00000015")
    assert mirror.data.pricing.text is not None and mirror.data.pricing.text.prompt == Decimal("0.0000004")
    assert mapped.data.pricing.text is not None and mapped.data.pricing.text.prompt == Decimal("0.0000007")
