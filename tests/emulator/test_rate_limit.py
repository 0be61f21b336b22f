"""One sliding-window rate limit per account over every route, reported on every response."""

from __future__ import annotations

import httpx
from emulator_http import anthropic, bearer, goog, user_chat, user_contents, user_messages

LIMITED = "rb-limited-key"  # 6 requests per minute


async def test_seventh_request_in_a_minute_is_429_with_rate_limit_body(http: httpx.AsyncClient) -> None:
    statuses = [
        (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer(LIMITED))).status_code
        for _ in range(6)
    ]
    response = await http.post("/v1/chat/completions", json=user_chat(), headers=bearer(LIMITED))

    assert statuses == [200] * 6
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "429"
    assert error["rate_limit"] == {"rpm": 6, "qps": 0.1}
    assert response.headers["x-ratelimit-remaining-requests"] == "0"
    assert response.headers["retry-after"] == "60"


async def test_every_response_carries_the_window_headers(http: httpx.AsyncClient) -> None:
    first = await http.get("/v1/models", headers=bearer(LIMITED))
    second = await http.post("/v1/chat/completions", json=user_chat("no-such-model"), headers=bearer(LIMITED))

    assert first.headers["x-ratelimit-limit-requests"] == "6"
    assert first.headers["x-ratelimit-remaining-requests"] == "5"
    assert first.headers["x-ratelimit-reset-requests"] == "60.000s"
    assert second.status_code == 400
    assert second.headers["x-ratelimit-remaining-requests"] == "4"


async def test_one_limit_over_all_routes_and_families(http: httpx.AsyncClient) -> None:
    await http.get("/v1/models", headers=bearer(LIMITED))
    await http.get("/v1/models/pricing?model=relay-chat-small", headers=bearer(LIMITED))
    await http.post("/v1/messages", json=user_messages(), headers=anthropic(LIMITED))
    await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json=user_contents(), headers=goog(LIMITED)
    )
    await http.post(
        "/v1/responses", json={"model": "relay-chat-small", "input": "x"}, headers=bearer(LIMITED)
    )
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer(LIMITED))

    refused = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json=user_contents(), headers=goog(LIMITED)
    )

    assert refused.status_code == 429
    assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert refused.headers["x-ratelimit-limit-requests"] == "6"


async def test_the_window_slides_with_the_emulator_clock(http: httpx.AsyncClient) -> None:
    for _ in range(6):
        await http.get("/v1/models", headers=bearer(LIMITED))
    await http.post("/_emulator/clock/advance", json={"seconds": 30})
    assert (await http.get("/v1/models", headers=bearer(LIMITED))).status_code == 429

    await http.post("/_emulator/clock/advance", json={"seconds": 30})

    response = await http.get("/v1/models", headers=bearer(LIMITED))
    assert response.status_code == 200
    assert response.headers["x-ratelimit-remaining-requests"] == "5"


async def test_refused_requests_do_not_take_a_slot(http: httpx.AsyncClient) -> None:
    for _ in range(10):
        await http.get("/v1/models", headers=bearer(LIMITED))
    await http.post("/_emulator/clock/advance", json={"seconds": 60})

    response = await http.get("/v1/models", headers=bearer(LIMITED))

    assert response.headers["x-ratelimit-remaining-requests"] == "5"


async def test_accounts_have_separate_windows(http: httpx.AsyncClient) -> None:
    for _ in range(7):
        await http.get("/v1/models", headers=bearer(LIMITED))

    response = await http.get("/v1/models", headers=bearer("rb-standard-key"))

    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-requests"] == "120"


async def test_interface_example_limit_120_per_minute_is_2_per_second(http: httpx.AsyncClient) -> None:
    for _ in range(120):
        await http.get("/v1/models", headers=bearer("rb-standard-key"))

    response = await http.get("/v1/models", headers=bearer("rb-standard-key"))

    assert response.status_code == 429
    assert response.json()["error"]["rate_limit"] == {"rpm": 120, "qps": 2.0}


async def test_unlimited_account_is_never_refused(http: httpx.AsyncClient) -> None:
    for _ in range(200):
        response = await http.get("/v1/models", headers=bearer())

    assert response.status_code == 200
    assert "x-ratelimit-limit-requests" not in response.headers
