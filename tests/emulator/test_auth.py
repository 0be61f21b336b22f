"""The interface's authentication table, row by row, with the real header names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from emulator_http import (
    REVOKED_KEY,
    anthropic,
    bearer,
    goog,
    user_chat,
    user_contents,
    user_messages,
    user_responses,
)

Headers = Callable[[str], dict[str, str]]

# (method, path, body, the headers the route wants, a well-formed header of another family)
ROWS: list[tuple[str, str, dict[str, Any] | None, Headers, Headers]] = [
    ("POST", "/v1/chat/completions", user_chat(), bearer, goog),
    ("POST", "/v1/responses", user_responses(), bearer, anthropic),
    ("POST", "/v1/messages", user_messages(), anthropic, bearer),
    ("POST", "/v1beta/models/relay-gemini-flash:generateContent", user_contents(), goog, bearer),
    ("GET", "/v1/models/pricing?model=relay-chat-small", None, bearer, anthropic),
    ("POST", "/openai/v1/chat/completions", user_chat("relay-claude-haiku"), bearer, goog),
    ("POST", "/anthropic/v1/messages", user_messages("relay-chat-small"), anthropic, bearer),
    ("POST", "/gemini/v1beta/models/relay-chat-small:generateContent", user_contents(), goog, bearer),
]
IDS = [f"{method} {path}" for method, path, *_ in ROWS]


def _error_of(response: httpx.Response) -> tuple[int, str]:
    error = response.json()["error"]
    if "/v1beta/" in str(response.request.url):
        return error["code"], error["status"]
    return int(error["code"]), error["type"]


async def call(
    http: httpx.AsyncClient, method: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    return await http.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize(("method", "path", "body", "wanted", "other"), ROWS, ids=IDS)
async def test_the_routes_own_header_is_accepted(
    http: httpx.AsyncClient, method: str, path: str, body: Any, wanted: Headers, other: Headers
) -> None:
    assert (await call(http, method, path, body, wanted("rb-demo-key"))).status_code == 200


@pytest.mark.parametrize(("method", "path", "body", "wanted", "other"), ROWS, ids=IDS)
@pytest.mark.parametrize("case", ["missing", "invalid", "revoked", "other family's header"])
async def test_missing_invalid_revoked_or_misplaced_keys_are_401(
    http: httpx.AsyncClient, method: str, path: str, body: Any, wanted: Headers, other: Headers, case: str
) -> None:
    headers = {
        "missing": {},
        "invalid": wanted("rb-not-a-key"),
        "revoked": wanted(REVOKED_KEY),
        "other family's header": other("rb-demo-key"),
    }[case]
    if case == "missing" and wanted is anthropic:
        headers = {"anthropic-version": "2023-06-01"}

    response = await call(http, method, path, body, headers)

    assert response.status_code == 401
    expected = (401, "UNAUTHENTICATED") if "/v1beta/" in path else (401, "authentication_error")
    assert _error_of(response) == expected


@pytest.mark.parametrize("path", ["/v1/messages", "/anthropic/v1/messages"])
@pytest.mark.parametrize("version", [None, "2024-10-22"])
async def test_messages_needs_the_version_header(
    http: httpx.AsyncClient, path: str, version: str | None
) -> None:
    headers = {"x-api-key": "rb-demo-key"}
    if version:
        headers["anthropic-version"] = version

    response = await http.post(path, json=user_messages(), headers=headers)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "anthropic-version" in response.json()["error"]["message"]


@pytest.mark.parametrize("headers", [bearer(), {"x-api-key": "rb-demo-key"}])
async def test_catalog_takes_bearer_or_x_api_key(http: httpx.AsyncClient, headers: dict[str, str]) -> None:
    assert (await http.get("/v1/models", headers=headers)).status_code == 200


@pytest.mark.parametrize("headers", [{}, goog(), bearer("rb-not-a-key"), {"x-api-key": REVOKED_KEY}])
async def test_catalog_refuses_other_keys(http: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await http.get("/v1/models", headers=headers)

    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


async def test_a_key_never_appears_in_an_error(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/chat/completions", json=user_chat(), headers=bearer("rb-secret-guess"))

    assert "rb-secret-guess" not in response.text
