"""Requests built from the client's prepared parts carry what ``httpx.AsyncClient.build_request``
would have put on them, and the client keeps no cookies."""

from __future__ import annotations

import json
from typing import Any

import httpx
from gateway_support import CHAT_ANSWER
from pydantic import SecretStr

from relaybatch.gateway import ClientTimeouts, GatewayClient

KEY = "sk-test-request-building"


def _recording_client(seen: list[httpx.Request], base_url: str, **options: Any) -> GatewayClient:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "GET":
            return httpx.Response(
                200, json={"object": "list", "data": []}, headers={"set-cookie": "s=1; Path=/"}
            )
        return httpx.Response(200, json=CHAT_ANSWER, headers={"set-cookie": "s=1; Path=/"})

    return GatewayClient(base_url, SecretStr(KEY), transport=httpx.MockTransport(answer), **options)


async def test_requests_match_what_httpx_would_build() -> None:
    seen: list[httpx.Request] = []
    timeouts = ClientTimeouts(connect=3, read=7, write=5, pool=9)
    async with _recording_client(
        seen, "https://gw.example/api", headers={"x-extra": "1"}, timeouts=timeouts
    ) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
        await client.chat_completions(body)
        await client.list_models()
        reference = httpx.AsyncClient(
            base_url="https://gw.example/api", headers={"x-extra": "1"}, timeout=timeouts.default()
        )
        expected = reference.build_request(
            "POST", "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        )
        await reference.aclose()

    post, get = seen
    assert post.url == expected.url == httpx.URL("https://gw.example/api/v1/chat/completions")
    assert dict(post.headers) == dict(expected.headers)
    assert json.loads(post.content) == json.loads(expected.content)
    assert post.extensions["timeout"] == expected.extensions["timeout"]
    assert get.url == httpx.URL("https://gw.example/api/v1/models")
    assert "content-type" not in get.headers and get.headers["x-extra"] == "1"


async def test_cookies_set_by_an_answer_are_never_sent_back() -> None:
    seen: list[httpx.Request] = []
    async with _recording_client(seen, "http://gw.example") as client:
        for _ in range(2):
            await client.list_models()
    assert all("cookie" not in request.headers for request in seen)
