"""GET /v1/models: the catalog the account sees, sorted, counted, with RFC 3339 times."""

from __future__ import annotations

from datetime import datetime

import httpx
from emulator_http import anthropic, bearer

FAMILIES = {"openai", "anthropic", "gemini"}


async def test_catalog_lists_visible_models_sorted_with_total(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/models", headers=bearer())

    assert response.status_code == 200
    body = response.json()
    ids = [entry["id"] for entry in body["data"]]
    assert body["object"] == "list"
    assert ids == sorted(ids)
    assert body["total"] == len(ids)
    assert "relay-chat-internal" not in ids  # hidden
    assert "relay-chat-preview" not in ids  # unlisted
    assert {"relay-chat-small", "relay-claude-sonnet", "relay-gemini-pro", "relay-judge-1"} <= set(ids)


async def test_catalog_entries_have_family_label_and_rfc3339_time(http: httpx.AsyncClient) -> None:
    body = (await http.get("/v1/models", headers=bearer())).json()

    families = {entry["type_target"] for entry in body["data"]}
    assert families == FAMILIES
    small = next(entry for entry in body["data"] if entry["id"] == "relay-chat-small")
    assert small["display_name"] == "Relay Chat Small"
    assert small["created_at"] == "2026-01-15T00:00:00Z"
    for entry in body["data"]:
        assert datetime.fromisoformat(entry["created_at"].replace("Z", "+00:00")).tzinfo is not None


async def test_catalog_has_every_model_kind(http: httpx.AsyncClient) -> None:
    ids = {entry["id"] for entry in (await http.get("/v1/models", headers=bearer())).json()["data"]}

    # image (both families), V2 video, V1-only video, judgment and search
    expected = {"relay-image-1", "relay-image-2", "relay-gemini-image", "relay-video-2", "relay-video-v1"}
    assert expected | {"relay-judge-1", "relay-websearch"} <= ids


async def test_catalog_accepts_x_api_key(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/models", headers={"x-api-key": "rb-demo-key"})

    assert response.status_code == 200
    assert response.json()["total"] > 0


async def test_catalog_shows_only_the_accounts_models(http: httpx.AsyncClient) -> None:
    body = (await http.get("/v1/models", headers=bearer("rb-restricted-key"))).json()

    assert [entry["id"] for entry in body["data"]] == [
        "relay-chat-small",
        "relay-claude-haiku",
        "relay-gemini-flash",
    ]
    assert body["total"] == 3


async def test_catalog_is_get_only(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/models", headers=bearer(), json={})

    assert response.status_code == 405
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "code": "405",
        "message": "method POST is not allowed on /v1/models",
    }


async def test_catalog_rejects_messages_headers_without_key_match(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/models", headers=anthropic("rb-nope"))

    assert response.status_code == 401
