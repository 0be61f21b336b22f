"""Legacy V1 video and GET /v1/tasks/{task_id} over raw HTTP."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from relaybatch.emulator import EmulatorState
from tests.emulator.codecs.mp4_checks import check_mp4
from tests.emulator.emulator_http import (
    EMPTY_KEY,
    OTHER_KEY,
    advance,
    assert_refused_for_free,
    bearer,
    charges,
)

ROUTE = "/v1/videos/generations"
MODEL = "relay-video-v1"
# Default media.video settings: pending 3 s, processing 15 s.
PENDING, PROCESSING = 3, 15


async def create(http: httpx.AsyncClient, key: str = "rb-demo-key", **fields: Any) -> httpx.Response:
    return await http.post(ROUTE, headers=bearer(key), json={"model": MODEL, "prompt": "a fox", **fields})


async def task(http: httpx.AsyncClient, task_id: str, key: str = "rb-demo-key") -> httpx.Response:
    return await http.get(f"/v1/tasks/{task_id}", headers=bearer(key))


async def test_create_returns_a_pending_gen_task_and_charges(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    response = await create(http)
    assert response.status_code == 200
    created = response.json()
    assert created["id"].startswith("gen-")
    assert (created["status"], created["type"], created["model"]) == ("pending", "video_generation", MODEL)
    datetime.fromisoformat(created["created_at"])
    assert "data" not in created and "error" not in created
    [charge] = charges(state, ROUTE)
    assert charge.usd == Decimal("0.05") * 5  # default 5 seconds x per-second price


async def test_seconds_set_the_charge(http: httpx.AsyncClient, state: EmulatorState) -> None:
    assert (await create(http, seconds=12)).status_code == 200
    assert charges(state, ROUTE)[0].usd == Decimal("0.05") * 12


async def test_states_pending_processing_completed_with_data(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    task_id = (await create(http, aspect_ratio="9:16", seconds=3)).json()["id"]
    assert (await task(http, task_id)).json()["status"] == "pending"
    await advance(http, PENDING)
    assert (await task(http, task_id)).json()["status"] == "processing"
    await advance(http, PROCESSING)
    done = (await task(http, task_id)).json()
    assert done["status"] == "completed" and "error" not in done
    data = done["data"]
    assert isinstance(data, dict) and data["mime_type"] == "video/mp4"
    assert (data["width"], data["height"]) == (720, 1280)
    assert len(charges(state, ROUTE)) == 1  # polls are free
    # The URL is presigned-style: it works without an auth header.
    file = await http.get(data["video_url"])
    assert file.status_code == 200 and file.headers["content-type"] == "video/mp4"
    assert check_mp4(file.content)["duration_ms"] == 3000


async def test_file_url_needs_its_token(http: httpx.AsyncClient) -> None:
    task_id = (await create(http)).json()["id"]
    await advance(http, 100)
    url = (await task(http, task_id)).json()["data"]["video_url"]
    assert (await http.get(url.replace("token=", "token=x"))).status_code == 404
    assert (await http.get(url.split("?")[0])).status_code == 404


async def test_fail_trigger_ends_failed_with_an_error_string(http: httpx.AsyncClient) -> None:
    task_id = (await create(http, prompt="a fox emulator:fail")).json()["id"]
    await advance(http, PENDING + PROCESSING)
    failed = (await task(http, task_id)).json()
    assert failed["status"] == "failed" and isinstance(failed["error"], str) and "data" not in failed


async def test_cancel_trigger_ends_cancelled(http: httpx.AsyncClient) -> None:
    task_id = (await create(http, prompt="EMULATOR:CANCEL a fox")).json()["id"]
    await advance(http, PENDING)
    assert (await task(http, task_id)).json()["status"] == "processing"
    await advance(http, PROCESSING)
    cancelled = (await task(http, task_id)).json()
    assert cancelled["status"] == "cancelled" and "data" not in cancelled and "error" not in cancelled


async def test_unknown_and_foreign_tasks_are_404(http: httpx.AsyncClient) -> None:
    task_id = (await create(http)).json()["id"]
    for response in (await task(http, task_id, OTHER_KEY), await task(http, "gen-unknown")):
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("fields", "mentions"),
    [
        ({"model": "relay-video-2"}, "V2 video model"),
        ({"model": "relay-chat-small"}, "not served"),
        ({"model": "relay-unknown"}, "unknown model"),
        ({"prompt": ""}, "prompt"),
        ({"size": "1280x720"}, "V2 video schema"),
        ({"input_reference": "data:image/png;base64,aGk="}, "V2 video schema"),
        ({"seconds": "8"}, "V2 form"),
        ({"seconds": 0}, "seconds"),
        ({"seconds": 21}, "seconds"),
        ({"aspect_ratio": "4:3"}, "aspect_ratio"),
        ({"resolution": "4k"}, "resolution"),
        ({"image_url": "ftp://x/y.png"}, "image_url"),
        ({"seed": "7"}, "seed"),
        ({"negative_prompt": 3}, "negative_prompt"),
        ({"style": "noir"}, "unknown field"),
    ],
)
async def test_bad_bodies_are_400_and_free(
    http: httpx.AsyncClient, state: EmulatorState, fields: dict[str, Any], mentions: str
) -> None:
    assert_refused_for_free(await create(http, **fields), state, ROUTE, mentions)


async def test_optional_v1_fields_are_accepted(http: httpx.AsyncClient) -> None:
    response = await create(
        http,
        resolution="1080p",
        aspect_ratio="1:1",
        image_url="https://example.com/a.png",
        negative_prompt="blur",
        seed=7,
    )
    assert response.status_code == 200


async def test_auth_and_balance(http: httpx.AsyncClient) -> None:
    assert (await http.post(ROUTE, json={"model": MODEL, "prompt": "p"})).status_code == 401
    assert (await http.get("/v1/tasks/gen-x")).status_code == 401
    empty = await create(http, EMPTY_KEY)
    assert empty.status_code == 402 and empty.json()["error"]["type"] == "insufficient_balance"


async def test_null_optional_fields_mean_defaults(http: httpx.AsyncClient, state: EmulatorState) -> None:
    response = await create(http, seconds=None, aspect_ratio=None, resolution=None, size=None, seed=None)
    assert response.status_code == 200, response.text
    assert charges(state, ROUTE)[0].usd == Decimal("0.05") * 5


async def test_audio_flag_is_refused_for_a_silent_model(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    response = await create(http, audio=True)
    assert response.status_code == 400 and "audio" in response.json()["error"]["message"]
    assert (await create(http, audio=False)).status_code == 200
    assert charges(state, ROUTE)[0].usd == Decimal("0.25")
