"""The interface's error table, one row each: status, error.type, code as a string; and the
generate-content shape's three status names."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_http import bearer, goog, user_chat, user_contents

# status -> a request that earns it: (method, path, json body, headers)
ROWS: dict[int, tuple[str, str, Any, dict[str, str]]] = {
    400: ("POST", "/v1/chat/completions", {"messages": []}, bearer()),
    401: ("POST", "/v1/chat/completions", user_chat(), {}),
    402: ("POST", "/v1/chat/completions", user_chat(), bearer("rb-empty-key")),
    403: ("POST", "/v1/chat/completions", user_chat("relay-chat-reasoner"), bearer("rb-restricted-key")),
    404: ("GET", "/v1/models/pricing?model=no-such-model", None, bearer()),
    405: ("GET", "/v1/chat/completions", None, bearer()),
    409: ("GET", "/v1/models/pricing?model=relay-chat-multi", None, bearer()),
    429: ("POST", "/v1/chat/completions", user_chat(), {**bearer(), "x-emulator-fault": "status=429"}),
    500: ("POST", "/v1/chat/completions", user_chat(), {**bearer(), "x-emulator-fault": "status=500"}),
    529: ("POST", "/v1/chat/completions", user_chat(), {**bearer(), "x-emulator-fault": "status=529"}),
}
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_balance",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@pytest.mark.parametrize("status", sorted(ROWS))
async def test_error_table_row(http: httpx.AsyncClient, status: int) -> None:
    method, path, body, headers = ROWS[status]

    response = await http.request(method, path, json=body, headers=headers)

    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == TYPES[status]
    assert error["code"] == str(status)
    assert isinstance(error["message"], str) and error["message"]


async def test_unknown_path_is_404_in_the_envelope(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/nothing-here", headers=bearer())

    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


async def test_405_names_the_allowed_method(http: httpx.AsyncClient) -> None:
    response = await http.delete("/v1/messages")

    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("headers", "body", "status", "name"),
    [
        (goog(), {"contents": "nope"}, 400, "INVALID_ARGUMENT"),
        ({}, user_contents(), 401, "UNAUTHENTICATED"),
        ({**goog(), "x-emulator-fault": "status=429"}, user_contents(), 429, "RESOURCE_EXHAUSTED"),
    ],
)
async def test_generate_content_error_shape(
    http: httpx.AsyncClient, headers: dict[str, str], body: Any, status: int, name: str
) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json=body, headers=headers
    )

    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == status  # an integer in this shape
    assert error["status"] == name
    assert error["message"]


async def test_generate_content_wrong_method_is_405_in_its_shape(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1beta/models/relay-gemini-flash:generateContent", headers=goog())

    assert response.status_code == 405
    assert response.json()["error"]["code"] == 405
