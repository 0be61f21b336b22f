"""Video V2 fault modes of long batches (issue 28): an unknown running status, a render that never
ends, completed without content, a safety refusal, a cap on videos in flight, jittered render times
and expiring content. Each is what a real provider does; the runner's tests use them, not a proxy."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorState
from tests.emulator.emulator_http import AppFactory, advance, bearer, charges

MODEL = "relay-video-2"
# Default media.video settings: 5 s queued, then 10 s + 2 s per video second (4 s: 18 s).
QUEUED, RENDER_4S = 5, 18


async def create(http: httpx.AsyncClient, prompt: str = "waves", **fields: Any) -> httpx.Response:
    return await http.post("/v2/videos", headers=bearer(), json={"model": MODEL, "prompt": prompt, **fields})


async def poll(http: httpx.AsyncClient, video_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = (await http.get(f"/v2/videos/{video_id}", headers=bearer())).json()
    return answer


def client_for(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://emulator.test")


async def test_running_status_renames_in_progress(make_app: AppFactory) -> None:
    async with client_for(make_app({"video": {"running_status": "processing"}})) as http:
        video_id = (await create(http)).json()["id"]
        await advance(http, QUEUED + 1)
        assert (await poll(http, video_id))["status"] == "processing"
        await advance(http, RENDER_4S)
        assert (await poll(http, video_id))["status"] == "completed"


async def test_a_stuck_render_never_ends(http: httpx.AsyncClient) -> None:
    video_id = (await create(http, "waves emulator:stuck")).json()["id"]
    await advance(http, 10 * 86_400)
    video = await poll(http, video_id)
    assert (video["status"], video["progress"], video["completed_at"]) == ("in_progress", 99, None)
    # It can still be cancelled, for free.
    cancelled = (await http.delete(f"/v2/videos/{video_id}", headers=bearer())).json()
    assert cancelled["status"] == "cancelled"


async def test_completed_without_content(http: httpx.AsyncClient, state: EmulatorState) -> None:
    video_id = (await create(http, "waves emulator:empty")).json()["id"]
    await advance(http, QUEUED + RENDER_4S + 1)
    assert (await poll(http, video_id))["status"] == "completed"
    content = await http.get(f"/v2/videos/{video_id}/content", headers=bearer())
    assert content.status_code == 404
    assert "without content" in content.json()["error"]["message"]
    assert len(charges(state, "/v2/videos")) == 1  # paid all the same


async def test_a_safety_refusal_fails_when_rendering_starts(http: httpx.AsyncClient) -> None:
    video_id = (await create(http, "waves emulator:unsafe")).json()["id"]
    assert (await poll(http, video_id))["status"] == "queued"
    await advance(http, QUEUED)
    video = await poll(http, video_id)
    assert video["status"] == "failed"
    assert video["error"]["code"] == "moderation_blocked"


async def test_a_cap_on_videos_in_flight_refuses_with_the_concurrency_error(make_app: AppFactory) -> None:
    app = make_app({"video": {"max_in_flight": 2}})
    state: EmulatorState = app.state.emulator
    async with client_for(app) as http:
        first = (await create(http)).json()["id"]
        assert (await create(http)).status_code == 200
        refused = await create(http)
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_error" and "rate_limit" not in error
        assert error["concurrency"] == {"limit": 2, "in_flight": 2}
        assert len(charges(state, "/v2/videos")) == 2  # the refused create is free
        # The admin API counts what the cap counts.
        in_flight = (await http.get("/_emulator/videos")).json()["in_flight"]
        assert in_flight == [{"account": "demo", "model": "relay-video-2", "count": 2}]
        log = (await http.get("/_emulator/requests?distinct=false")).json()["recent"]
        assert [entry["status"] for entry in log] == [200, 200, 429]
        # Another model has its own count.
        assert (
            await http.post(
                "/v2/videos", headers=bearer(), json={"model": "relay-video-2-pro", "prompt": "waves"}
            )
        ).status_code == 200
        # A finished or cancelled video frees its slot.
        await http.delete(f"/v2/videos/{first}", headers=bearer())
        assert (await create(http)).status_code == 200
        assert (await create(http)).status_code == 429
        await advance(http, QUEUED + RENDER_4S + 1)
        assert (await create(http)).status_code == 200
        assert (await http.get("/_emulator/videos")).json()["in_flight"] == [
            {"account": "demo", "model": "relay-video-2", "count": 1}
        ]


async def test_render_jitter_spreads_render_times_per_video(make_app: AppFactory) -> None:
    async with client_for(make_app({"video": {"render_jitter": 0.5, "queued_seconds": 0}})) as http:
        ids = [(await create(http, f"waves {n}")).json()["id"] for n in range(20)]
        await advance(http, 10_000)
        durations = {(video := await poll(http, vid))["completed_at"] - video["created_at"] for vid in ids}
    assert len(durations) > 3
    assert min(durations) >= int(RENDER_4S * 0.5) and max(durations) <= RENDER_4S * 1.5


async def test_content_expires_after_its_window(make_app: AppFactory) -> None:
    async with client_for(make_app({"video": {"expires_after_seconds": 60}})) as http:
        video_id = (await create(http)).json()["id"]
        await advance(http, QUEUED + RENDER_4S + 30)
        video = await poll(http, video_id)
        assert video["expires_at"] - video["completed_at"] == 60
        assert (await http.get(f"/v2/videos/{video_id}/content", headers=bearer())).status_code == 200
        await advance(http, 60)
        gone = await http.get(f"/v2/videos/{video_id}/content", headers=bearer())
        assert gone.status_code == 404 and "expired" in gone.json()["error"]["message"]


async def test_v1_file_links_expire_and_a_new_poll_gives_a_fresh_one(make_app: AppFactory) -> None:
    async with client_for(make_app({"video": {"v1_link_seconds": 60}})) as http:
        body = {"model": "relay-video-v1", "prompt": "a river delta"}
        task_id = (await http.post("/v1/videos/generations", headers=bearer(), json=body)).json()["id"]
        await advance(http, 30)
        link = (await http.get(f"/v1/tasks/{task_id}", headers=bearer())).json()["data"]["video_url"]
        assert "expires=" in link
        assert (await http.get(link)).status_code == 200
        await advance(http, 61)
        expired = await http.get(link)
        assert expired.status_code == 403 and "expired" in expired.json()["error"]["message"]
        fresh = (await http.get(f"/v1/tasks/{task_id}", headers=bearer())).json()["data"]["video_url"]
        assert fresh != link and (await http.get(fresh)).status_code == 200
        forged = fresh.replace("expires=", "expires=9")
        assert (await http.get(forged)).status_code == 404  # the expiry is signed into the token
