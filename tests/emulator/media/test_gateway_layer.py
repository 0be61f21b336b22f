"""The core's gateway layer on the media routes: polls count against the rate limit, faults apply."""

from __future__ import annotations

import httpx
import pytest

from relaybatch.emulator import EmulatorState
from tests.emulator.emulator_http import bearer, charges

LIMITED = "rb-limited-key"  # 6 requests per minute


async def test_video_polls_count_against_the_rate_limit(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    created = await http.post(
        "/v2/videos", headers=bearer(LIMITED), json={"model": "relay-video-2", "prompt": "p"}
    )
    assert created.status_code == 200
    assert "x-ratelimit-limit-requests" in created.headers
    statuses = [
        (await http.get(f"/v2/videos/{created.json()['id']}", headers=bearer(LIMITED))).status_code
        for _ in range(6)
    ]
    assert statuses == [200] * 5 + [429]
    assert len(charges(state, "/v2/videos")) == 1


async def test_task_polls_are_rate_limited_with_the_standard_envelope(http: httpx.AsyncClient) -> None:
    for _ in range(6):
        await http.get("/v1/tasks/gen-none", headers=bearer(LIMITED))
    limited = await http.get("/v1/tasks/gen-none", headers=bearer(LIMITED))
    assert limited.status_code == 429
    error = limited.json()["error"]
    assert error["type"] == "rate_limit_error" and error["rate_limit"]["rpm"] == 6


async def test_drop_after_on_a_billed_create_charges_without_an_answer(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    with pytest.raises(httpx.TransportError):
        await http.post(
            "/v2/videos",
            headers={**bearer(), "x-emulator-fault": "drop=after"},
            json={"model": "relay-video-2", "prompt": "p"},
        )
    assert len(charges(state, "/v2/videos")) == 1


async def test_injected_status_is_not_charged(http: httpx.AsyncClient, state: EmulatorState) -> None:
    response = await http.post(
        "/v1/images/generations",
        headers={**bearer(), "x-emulator-fault": "status=529"},
        json={"model": "relay-image-2", "prompt": "p"},
    )
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"
    assert charges(state, "/v1/images/generations") == []
