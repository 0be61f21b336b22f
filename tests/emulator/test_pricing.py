"""GET /v1/models/pricing: one provider, agreeing providers, disagreeing providers (409), selection."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_http import bearer

from relaybatch.emulator import EmulatorState


async def price(http: httpx.AsyncClient, **params: Any) -> httpx.Response:
    return await http.get("/v1/models/pricing", params=params, headers=bearer())


async def test_single_provider_returns_its_price_and_name(http: httpx.AsyncClient) -> None:
    response = await price(http, model="relay-chat-small")

    assert response.status_code == 200
    assert response.json() == {
        "object": "pricing",
        "data": {
            "id": "relay-chat-small",
            "display_name": "Relay Chat Small",
            "type_target": "openai",
            "provider": "alpha",
            "pricing": {
                "kind": "token",
                "text": {"prompt": "0.00000015", "completion": "0.0000006"},
                "cache": {"read": "0.000000075"},
            },
        },
    }


async def test_providers_with_the_same_price_give_one_price(http: httpx.AsyncClient) -> None:
    data = (await price(http, model="relay-chat-mirror")).json()["data"]

    assert "provider" not in data
    assert data["pricing"]["text"] == {"prompt": "0.0000004", "completion": "0.0000016"}


async def test_providers_with_different_prices_conflict(http: httpx.AsyncClient) -> None:
    response = await price(http, model="relay-chat-multi")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "409"
    assert "provider" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("params", "prompt"), [({"provider": "beta"}, "0.0000007"), ({"mapping_id": 131}, "0.0000005")]
)
async def test_provider_or_mapping_selects_a_channel(
    http: httpx.AsyncClient, params: dict[str, Any], prompt: str
) -> None:
    data = (await price(http, model="relay-chat-multi", **params)).json()["data"]

    assert data["pricing"]["text"]["prompt"] == prompt
    assert data["provider"] in {"alpha", "beta"}


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({}, 400),
        ({"model": "relay-chat-multi", "mapping_id": "x"}, 400),
        ({"model": "no-such-model"}, 404),
        ({"model": "relay-chat-internal"}, 404),
        ({"model": "relay-chat-multi", "provider": "gamma"}, 404),
    ],
)
async def test_bad_pricing_lookups(http: httpx.AsyncClient, params: dict[str, Any], status: int) -> None:
    response = await price(http, **params)

    assert response.status_code == status


async def test_unlisted_model_still_has_a_price(http: httpx.AsyncClient) -> None:
    assert (await price(http, model="relay-chat-preview")).status_code == 200


async def test_pricing_is_get_only(http: httpx.AsyncClient) -> None:
    assert (await http.put("/v1/models/pricing", headers=bearer())).status_code == 405


def _paths(tree: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        paths |= _paths(value, path + ".") if isinstance(value, dict) else {path}
    return paths


async def test_every_pricing_path_is_used_by_some_model(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    seen: set[str] = set()
    for model_id in state.models:
        response = await price(
            http, model=model_id, mapping_id=state.models[model_id].providers[0].mapping_id
        )
        seen |= _paths(response.json()["data"]["pricing"])

    assert {
        "kind",
        "text.prompt",
        "text.completion",
        "text.internal_reasoning",
        "cache.read",
        "cache.write",
        "cache.write_1h",
        "multimodal.input_image",
        "multimodal.output_image",
        "tiers.over_200k.text.prompt",
        "tiers.over_200k.cache.read",
        "generation.image.per_image",
        "generation.audio.per_second",
        "generation.video.per_second",
        "generation.video.per_second_with_audio",
    } <= seen
