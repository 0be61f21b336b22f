"""Video V2 over raw HTTP: create, poll, cancel, download; states driven by the emulator clock."""

from __future__ import annotations

import base64
import io
from decimal import Decimal
from typing import Any

import httpx
import pytest
from PIL import Image

from relaybatch.emulator import EmulatorState
from tests.emulator.codecs.mp4_checks import check_h264_samples, check_mp4
from tests.emulator.emulator_http import (
    EMPTY_KEY,
    OTHER_KEY,
    REVOKED_KEY,
    START,
    advance,
    assert_refused_for_free,
    bearer,
    charges,
)

MODEL = "relay-video-2"
# Default media.video settings: 5 s queued, then 10 s + 2 s per video second of rendering.
QUEUED, RENDER_4S = 5, 18


async def create(http: httpx.AsyncClient, key: str = "rb-demo-key", **fields: Any) -> httpx.Response:
    return await http.post(
        "/v2/videos", headers=bearer(key), json={"model": MODEL, "prompt": "waves", **fields}
    )


async def poll(http: httpx.AsyncClient, video_id: str, key: str = "rb-demo-key") -> httpx.Response:
    return await http.get(f"/v2/videos/{video_id}", headers=bearer(key))


async def test_create_returns_the_video_object_with_a_fixed_quote(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    response = await create(http, seconds="8", size="1792x1024")
    assert response.status_code == 200
    video = response.json()
    assert video["id"].startswith("video_")
    assert video["object"] == "video"
    assert (video["model"], video["status"], video["progress"]) == (MODEL, "queued", 0)
    assert (video["seconds"], video["size"]) == ("8", "1792x1024")
    assert video["created_at"] == int(START)
    assert video["completed_at"] is None and video["expires_at"] is None and video["error"] is None
    assert Decimal(video["quote_usd"]) == Decimal("0.10") * 8
    [charge] = charges(state, "/v2/videos")
    assert charge.usd == Decimal(video["quote_usd"]) and charge.model == MODEL


async def test_defaults_are_four_seconds_portrait(http: httpx.AsyncClient) -> None:
    video = (await create(http)).json()
    assert (video["seconds"], video["size"]) == ("4", "720x1280")


async def test_state_machine_follows_the_clock(http: httpx.AsyncClient, state: EmulatorState) -> None:
    video_id = (await create(http)).json()["id"]
    seen = []
    for step in (1, QUEUED, 4, 5, 5, RENDER_4S):
        await advance(http, step)
        video = (await poll(http, video_id)).json()
        seen.append((video["status"], video["progress"]))
    statuses = [status for status, _ in seen]
    assert statuses == ["queued", "in_progress", "in_progress", "in_progress", "in_progress", "completed"]
    progress = [value for _, value in seen]
    assert progress == sorted(progress) and progress[-1] == 100 and 0 < progress[2] < 100
    video = (await poll(http, video_id)).json()
    assert video["completed_at"] == int(START) + QUEUED + RENDER_4S
    assert video["expires_at"] > video["completed_at"]
    assert len(charges(state, "/v2/videos")) == 1  # polls are free


async def test_content_is_a_real_mp4_of_the_requested_length(http: httpx.AsyncClient) -> None:
    video_id = (await create(http, seconds="12", size="1280x720")).json()["id"]
    await advance(http, 100)
    response = await http.get(f"/v2/videos/{video_id}/content", headers=bearer())
    assert response.status_code == 200
    assert response.headers["content-type"] == "video/mp4"
    facts = check_mp4(response.content)
    assert facts["duration_ms"] == 12_000 and facts["width"] > facts["height"]
    assert check_h264_samples(response.content) == facts["frames"]


@pytest.mark.parametrize(("variant", "pil_format"), [("thumbnail", "WEBP"), ("spritesheet", "JPEG")])
async def test_content_variants_are_images(http: httpx.AsyncClient, variant: str, pil_format: str) -> None:
    video_id = (await create(http)).json()["id"]
    await advance(http, 100)
    response = await http.get(f"/v2/videos/{video_id}/content", params={"variant": variant}, headers=bearer())
    assert response.status_code == 200
    assert Image.open(io.BytesIO(response.content)).format == pil_format


async def test_content_before_completion_and_bad_variant_are_400(http: httpx.AsyncClient) -> None:
    video_id = (await create(http)).json()["id"]
    early = await http.get(f"/v2/videos/{video_id}/content", headers=bearer())
    assert early.status_code == 400 and "queued" in early.json()["error"]["message"]
    await advance(http, 100)
    bad = await http.get(f"/v2/videos/{video_id}/content", params={"variant": "gif"}, headers=bearer())
    assert bad.status_code == 400


async def test_content_expires(http: httpx.AsyncClient) -> None:
    video_id = (await create(http)).json()["id"]
    await advance(http, 100 + 3600)
    response = await http.get(f"/v2/videos/{video_id}/content", headers=bearer())
    assert response.status_code == 404


async def test_fail_trigger_fails_half_way_with_an_error(http: httpx.AsyncClient) -> None:
    video_id = (await create(http, prompt="waves emulator:fail")).json()["id"]
    await advance(http, QUEUED + RENDER_4S / 4)
    assert (await poll(http, video_id)).json()["status"] == "in_progress"
    await advance(http, RENDER_4S / 2)
    video = (await poll(http, video_id)).json()
    assert video["status"] == "failed"
    assert set(video["error"]) == {"code", "message"}
    assert video["completed_at"] is None
    assert (await http.get(f"/v2/videos/{video_id}/content", headers=bearer())).status_code == 400


async def test_delete_cancels_a_running_video_for_free(http: httpx.AsyncClient, state: EmulatorState) -> None:
    video_id = (await create(http)).json()["id"]
    await advance(http, QUEUED + 6)
    response = await http.delete(f"/v2/videos/{video_id}", headers=bearer())
    assert response.status_code == 200
    cancelled = response.json()
    assert cancelled["status"] == "cancelled" and 0 < cancelled["progress"] < 100
    await advance(http, 100)
    assert (await poll(http, video_id)).json()["status"] == "cancelled"
    assert len(charges(state, "/v2/videos")) == 1


async def test_delete_of_a_finished_video_deletes_it(http: httpx.AsyncClient) -> None:
    video_id = (await create(http)).json()["id"]
    await advance(http, 100)
    response = await http.delete(f"/v2/videos/{video_id}", headers=bearer())
    assert response.json() == {"id": video_id, "object": "video.deleted", "deleted": True}
    assert (await poll(http, video_id)).status_code == 404


async def test_unknown_and_foreign_ids_are_404(http: httpx.AsyncClient) -> None:
    video_id = (await create(http)).json()["id"]
    for key, target in ((OTHER_KEY, video_id), ("rb-demo-key", "video_000")):
        for response in (
            await poll(http, target, key),
            await http.delete(f"/v2/videos/{target}", headers=bearer(key)),
            await http.get(f"/v2/videos/{target}/content", headers=bearer(key)),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["type"] == "not_found_error"
    assert (await poll(http, video_id)).json()["status"] == "queued"  # the foreign DELETE did nothing


async def test_quote_stays_fixed_when_prices_change(http: httpx.AsyncClient, state: EmulatorState) -> None:
    video = (await create(http)).json()
    pricing = state.price_for(MODEL)
    assert pricing is not None
    pricing["generation"]["video"]["per_second"] = "9.99"
    assert (await poll(http, video["id"])).json()["quote_usd"] == video["quote_usd"]


@pytest.mark.parametrize(
    ("fields", "mentions"),
    [
        ({"model": "relay-video-v1"}, "legacy V1"),
        ({"model": "relay-image-2"}, "not served"),
        ({"model": "relay-unknown"}, "unknown model"),
        ({"model": None}, "model"),
        ({"prompt": None}, "prompt"),
        ({"prompt": " "}, "prompt"),
        ({"seconds": "5"}, "seconds"),
        ({"seconds": 4}, "seconds"),
        ({"size": "1920x1080"}, "size"),
        ({"aspect_ratio": "16:9"}, "V2 video schema"),
        ({"resolution": "720p"}, "V2 video schema"),
        ({"image_url": "https://example.com/a.png"}, "V2 video schema"),
        ({"input_reference": "https://example.com/a.png"}, "data URL"),
        ({"input_reference": "data:text/plain;base64,aGk="}, "input_reference"),
        ({"input_reference": "data:image/png;base64,***"}, "base64"),
    ],
)
async def test_bad_bodies_are_400_and_free(
    http: httpx.AsyncClient, state: EmulatorState, fields: dict[str, Any], mentions: str
) -> None:
    assert_refused_for_free(await create(http, **fields), state, "/v2/videos", mentions)


async def test_reference_image_is_accepted(http: httpx.AsyncClient) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format="PNG")
    reference = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    assert (await create(http, input_reference=reference)).status_code == 200


async def test_auth_and_balance(http: httpx.AsyncClient, state: EmulatorState) -> None:
    assert (await http.post("/v2/videos", json={"model": MODEL, "prompt": "p"})).status_code == 401
    revoked = await create(http, REVOKED_KEY)
    assert revoked.status_code == 401 and revoked.json()["error"]["type"] == "authentication_error"
    assert (await poll(http, "video_x", REVOKED_KEY)).status_code == 401
    empty = await create(http, EMPTY_KEY)
    assert empty.status_code == 402 and empty.json()["error"]["type"] == "insufficient_balance"
    assert charges(state, "/v2/videos") == []
    assert (await http.put("/v2/videos", headers=bearer(), json={})).status_code == 405


async def test_null_optional_fields_mean_defaults(http: httpx.AsyncClient) -> None:
    video = (await create(http, seconds=None, size=None, input_reference=None)).json()
    assert (video["seconds"], video["size"]) == ("4", "720x1280")


async def test_audio_flag_uses_the_with_audio_price(http: httpx.AsyncClient, state: EmulatorState) -> None:
    pro = await http.post(
        "/v2/videos",
        headers=bearer(),
        json={"model": "relay-video-2-pro", "prompt": "p", "seconds": "8", "audio": True},
    )
    assert pro.status_code == 200
    assert Decimal(pro.json()["quote_usd"]) == Decimal("0.50") * 8
    silent = await http.post(
        "/v2/videos", headers=bearer(), json={"model": "relay-video-2-pro", "prompt": "p", "audio": False}
    )
    assert Decimal(silent.json()["quote_usd"]) == Decimal("0.30") * 4
    refused = await create(http, audio=True)  # relay-video-2 has no with-audio price
    assert refused.status_code == 400 and "audio" in refused.json()["error"]["message"]
    assert (await create(http, audio="yes")).status_code == 400
    assert [charge.usd for charge in charges(state, "/v2/videos")] == [Decimal("4.00"), Decimal("1.20")]
