"""POST /v1/images/generations over raw HTTP: every row of the field table, bytes, usage, billing."""

from __future__ import annotations

import base64
import io
from decimal import Decimal
from typing import Any

import httpx
import pytest
from PIL import Image

from relaybatch.emulator import EmulatorState
from tests.emulator.emulator_http import (
    EMPTY_KEY,
    RESTRICTED_KEY,
    REVOKED_KEY,
    assert_refused_for_free,
    bearer,
    charges,
)

ROUTE = "/v1/images/generations"
NEWER, OLDER = "relay-image-2", "relay-image-1"
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "jpeg": b"\xff\xd8\xff"}


async def generate(http: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    body = {"model": NEWER, "prompt": "a lighthouse at dusk", **fields}
    return await http.post(ROUTE, headers=bearer(), json=body)


def decoded(entry: dict[str, Any]) -> tuple[bytes, Image.Image]:
    data = base64.b64decode(entry["b64_json"])
    picture = Image.open(io.BytesIO(data))
    picture.load()
    return data, picture


async def test_defaults_resolve_and_return_one_png(http: httpx.AsyncClient) -> None:
    response = await generate(http)
    assert response.status_code == 200
    document = response.json()
    assert isinstance(document["created"], int)
    assert (document["size"], document["quality"]) == ("1024x1024", "medium")
    assert (document["output_format"], document["background"]) == ("png", "opaque")
    assert len(document["data"]) == 1
    assert set(document["data"][0]) == {"b64_json"}  # no URL, no revised_prompt on the newer model
    data, picture = decoded(document["data"][0])
    assert data.startswith(MAGIC["png"])
    assert picture.format == "PNG"
    assert picture.width == picture.height


@pytest.mark.parametrize(
    ("output_format", "background", "pil_format", "has_alpha"),
    [
        ("png", "transparent", "PNG", True),
        ("webp", "transparent", "WEBP", True),
        ("jpeg", "opaque", "JPEG", False),
        ("webp", "opaque", "WEBP", False),
    ],
)
async def test_every_output_format_decodes(
    http: httpx.AsyncClient, output_format: str, background: str, pil_format: str, has_alpha: bool
) -> None:
    response = await generate(http, output_format=output_format, background=background, size="1536x1024", n=2)
    assert response.status_code == 200, response.text
    document = response.json()
    assert (document["output_format"], document["background"]) == (output_format, background)
    assert len(document["data"]) == 2
    for entry in document["data"]:
        data, picture = decoded(entry)
        assert picture.format == pil_format
        if output_format == "webp":
            assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
        else:
            assert data.startswith(MAGIC[output_format])
        assert ("A" in picture.getbands()) is has_alpha
        # Size shortcut: drawn smaller, aspect ratio kept (3:2).
        assert abs(picture.width / picture.height - 1.5) < 0.02


async def test_compression_changes_jpeg_bytes(http: httpx.AsyncClient) -> None:
    best = await generate(http, output_format="jpeg", output_compression=100)
    small = await generate(http, output_format="jpeg", output_compression=10)
    assert best.status_code == small.status_code == 200
    assert len(small.json()["data"][0]["b64_json"]) < len(best.json()["data"][0]["b64_json"])


async def test_same_request_same_bytes_and_n_images_differ(http: httpx.AsyncClient) -> None:
    first = (await generate(http, n=2)).json()["data"]
    again = (await generate(http, n=2)).json()["data"]
    assert first == again
    assert first[0]["b64_json"] != first[1]["b64_json"]


async def test_revised_prompt_only_on_the_older_model(http: httpx.AsyncClient) -> None:
    older = (await generate(http, model=OLDER, n=2)).json()
    assert all("a lighthouse at dusk" in entry["revised_prompt"] for entry in older["data"])
    assert older["usage"]["output_tokens_details"]["text_tokens"] > 0
    newer = (await generate(http, model=NEWER)).json()
    assert "revised_prompt" not in newer["data"][0]


def image_tokens(document: dict[str, Any]) -> int:
    return int(document["usage"]["output_tokens_details"]["image_tokens"])


async def test_usage_scales_with_size_quality_and_n(http: httpx.AsyncClient) -> None:
    low = (await generate(http, quality="low")).json()
    high = (await generate(http, quality="high")).json()
    xhigh = (await generate(http, quality="xhigh")).json()
    big = (await generate(http, quality="high", size="1536x1024")).json()
    three = (await generate(http, quality="high", n=3)).json()
    assert image_tokens(low) < image_tokens(high) < image_tokens(xhigh)
    assert image_tokens(big) > image_tokens(high)
    assert image_tokens(three) == 3 * image_tokens(high)
    usage = high["usage"]
    assert (
        usage["input_tokens"]
        == usage["input_tokens_details"]["text_tokens"] + usage["input_tokens_details"]["image_tokens"]
    )
    assert usage["output_tokens"] == image_tokens(high) + usage["output_tokens_details"]["text_tokens"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert high["quality"] == "high" and xhigh["quality"] == "xhigh"


@pytest.mark.parametrize(
    ("fields", "size"),
    [
        ({"size": "auto"}, "1024x1024"),
        ({"size": "1024x1536"}, "1024x1536"),
        ({"size": "1040x1040"}, "1040x1040"),
        ({"size": "3072x1024"}, "3072x1024"),  # exactly 3:1
        ({"size": "512x1536"}, "512x1536"),  # exactly 1:3
        ({"prompt": "x" * 32_000}, "1024x1024"),
        ({"n": 10}, "1024x1024"),
        ({"quality": "max"}, "1024x1024"),
        ({"moderation": "low", "user": "end-user-42"}, "1024x1024"),
        ({"output_format": "webp", "output_compression": 0}, "1024x1024"),
    ],
)
async def test_accepted_values(http: httpx.AsyncClient, fields: dict[str, Any], size: str) -> None:
    response = await generate(http, **fields)
    assert response.status_code == 200, response.text
    assert response.json()["size"] == size


@pytest.mark.parametrize(
    ("fields", "mentions"),
    [
        ({"prompt": None}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x" * 32_001}, "32000"),
        ({"n": 0}, "'n'"),
        ({"n": 11}, "'n'"),
        ({"n": "2"}, "'n'"),
        ({"size": "1000x1000"}, "16"),
        ({"size": "3088x1024"}, "aspect"),
        ({"size": "512x1552"}, "aspect"),
        ({"size": "big"}, "size"),
        ({"size": "256x256x1"}, "size"),
        ({"quality": "standard"}, "legacy"),
        ({"quality": "hd"}, "legacy"),
        ({"quality": "ultra"}, "quality"),
        ({"model": OLDER, "quality": "xhigh"}, "newer"),
        ({"model": OLDER, "quality": "max"}, "newer"),
        ({"background": "transparent", "output_format": "jpeg"}, "transparent"),
        ({"background": "clear"}, "background"),
        ({"output_format": "gif"}, "output_format"),
        ({"output_format": "jpeg", "output_compression": 101}, "output_compression"),
        ({"output_format": "webp", "output_compression": -1}, "output_compression"),
        ({"output_format": "png", "output_compression": 50}, "output_compression"),
        ({"moderation": "high"}, "moderation"),
        ({"user": 7}, "user"),
        ({"response_format": "url"}, "b64_json"),
        ({"model": "relay-no-such-model"}, "unknown model"),
        ({"model": None}, "model"),
        ({"model": "relay-chat-small"}, "not served"),
        ({"model": "relay-gemini-image"}, "not served"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_refused_with_400(
    http: httpx.AsyncClient, state: EmulatorState, fields: dict[str, Any], mentions: str
) -> None:
    response = await generate(http, **fields)
    assert_refused_for_free(response, state, ROUTE, mentions)
    assert response.json()["error"]["code"] == "400"


async def test_body_that_is_not_json_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post(ROUTE, headers=bearer(), content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "headers", [{}, bearer("rb-unknown"), bearer(REVOKED_KEY), {"x-api-key": "rb-demo-key"}]
)
async def test_auth_is_bearer_only(http: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await http.post(ROUTE, headers=headers, json={"model": NEWER, "prompt": "p"})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


async def test_model_outside_the_account_is_403(http: httpx.AsyncClient) -> None:
    response = await http.post(ROUTE, headers=bearer(RESTRICTED_KEY), json={"model": NEWER, "prompt": "p"})
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


async def test_wrong_method_is_405(http: httpx.AsyncClient) -> None:
    response = await http.get(ROUTE, headers=bearer())
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_per_image_price_is_charged_per_image(http: httpx.AsyncClient, state: EmulatorState) -> None:
    before = state.accounts["demo"].balance
    response = await generate(http, model=OLDER, n=3)
    assert response.status_code == 200
    [charge] = charges(state, ROUTE)
    assert charge.usd == Decimal("0.04") * 3
    assert charge.model == OLDER
    assert charge.usage == response.json()["usage"]
    assert state.accounts["demo"].balance == before - charge.usd


async def test_token_price_uses_text_and_output_image_rates(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    response = await generate(http, quality="high", size="1536x1024")
    usage = response.json()["usage"]
    pricing = state.price_for(NEWER)
    assert pricing is not None
    expected = usage["input_tokens_details"]["text_tokens"] * Decimal(pricing["text"]["prompt"]) + usage[
        "output_tokens_details"
    ]["image_tokens"] * Decimal(pricing["multimodal"]["output_image"])
    [charge] = charges(state, ROUTE)
    assert charge.usd == expected


async def test_insufficient_balance_is_402_before_processing(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    response = await http.post(ROUTE, headers=bearer(EMPTY_KEY), json={"model": NEWER, "prompt": "p"})
    assert response.status_code == 402
    assert response.json()["error"]["type"] == "insufficient_balance"
    assert charges(state, ROUTE) == []
    state.accounts["demo"].balance = Decimal("0.01")  # less than one 1024x1024 high image
    response = await generate(http, quality="high")
    assert response.status_code == 402
    assert state.accounts["demo"].balance == Decimal("0.01")


async def test_null_optional_fields_mean_defaults(http: httpx.AsyncClient) -> None:
    nulls = dict.fromkeys(
        ("n", "size", "quality", "background", "output_format", "output_compression", "moderation", "user")
    )
    response = await generate(http, **nulls)
    assert response.status_code == 200, response.text
    assert (response.json()["size"], response.json()["output_format"]) == ("1024x1024", "png")


async def test_safety_trigger_is_a_free_400(http: httpx.AsyncClient, state: EmulatorState) -> None:
    response = await generate(http, prompt="a lighthouse EMULATOR:UNSAFE")
    assert response.status_code == 400
    assert "moderation_blocked" in response.json()["error"]["message"]
    assert charges(state, ROUTE) == []
