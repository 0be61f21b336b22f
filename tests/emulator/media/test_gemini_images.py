"""Image models on generate-content: inlineData beside text, imageConfig rules, the safety trigger."""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import pytest
from PIL import Image

from relaybatch.emulator import EmulatorState
from tests.emulator.emulator_http import bearer

MODEL = "relay-gemini-image"
PATH = f"/v1beta/models/{MODEL}:generateContent"
GOOG = {"x-goog-api-key": "rb-demo-key"}


def body(
    text: str = "a red fox", config: dict[str, Any] | None = None, extra_parts: list[Any] | None = None
) -> dict[str, Any]:
    parts = [{"text": text}, *(extra_parts or [])]
    document: dict[str, Any] = {"contents": [{"role": "user", "parts": parts}]}
    if config is not None:
        document["generationConfig"] = config
    return document


def parts_of(response: httpx.Response) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = response.json()["candidates"][0]["content"]["parts"]
    return parts


def png_b64(size: tuple[int, int] = (8, 8)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, "blue").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


async def test_text_and_image_parts_with_image_tokens(http: httpx.AsyncClient, state: EmulatorState) -> None:
    response = await http.post(PATH, headers=GOOG, json=body(config={"imageConfig": {"aspectRatio": "16:9"}}))
    assert response.status_code == 200
    candidate = response.json()["candidates"][0]
    assert candidate["finishReason"] == "STOP"
    texts = [part for part in candidate["content"]["parts"] if "text" in part]
    images = [part for part in candidate["content"]["parts"] if "inlineData" in part]
    assert len(texts) == 1 and len(images) == 1
    assert all(not ("text" in part and "inlineData" in part) for part in candidate["content"]["parts"])
    inline = images[0]["inlineData"]
    assert inline["mimeType"] == "image/png"
    picture = Image.open(io.BytesIO(base64.b64decode(inline["data"])))
    assert picture.format == "PNG" and picture.width > picture.height  # 16:9
    details = {
        d["modality"]: d["tokenCount"] for d in response.json()["usageMetadata"]["candidatesTokensDetails"]
    }
    assert details["IMAGE"] == 1120 and details["TEXT"] > 0
    [charge] = [c for c in state.ledger if c.model == MODEL]
    assert charge.usd > 0


@pytest.mark.parametrize(("image_size", "tokens"), [("1K", 1120), ("2K", 1120), ("4K", 2000)])
async def test_image_size_sets_image_tokens(http: httpx.AsyncClient, image_size: str, tokens: int) -> None:
    response = await http.post(
        PATH, headers=GOOG, json=body(config={"imageConfig": {"imageSize": image_size}})
    )
    details = {
        d["modality"]: d["tokenCount"] for d in response.json()["usageMetadata"]["candidatesTokensDetails"]
    }
    assert details["IMAGE"] == tokens


async def test_image_only_modality_has_no_text_part(http: httpx.AsyncClient) -> None:
    response = await http.post(PATH, headers=GOOG, json=body(config={"responseModalities": ["IMAGE"]}))
    assert response.status_code == 200
    assert [list(part) for part in parts_of(response)] == [["inlineData"]]


async def test_text_only_modality_has_no_image(http: httpx.AsyncClient) -> None:
    response = await http.post(PATH, headers=GOOG, json=body(config={"responseModalities": ["TEXT"]}))
    assert all("inlineData" not in part for part in parts_of(response))


async def test_editing_with_an_inline_source_image(http: httpx.AsyncClient) -> None:
    source = {"inlineData": {"mimeType": "image/png", "data": png_b64()}}
    response = await http.post(PATH, headers=GOOG, json=body("make it red", extra_parts=[source]))
    assert response.status_code == 200
    assert any("inlineData" in part for part in parts_of(response))
    assert response.json()["usageMetadata"]["promptTokenCount"] >= 258


async def test_safety_trigger_refuses_with_text_and_no_image(http: httpx.AsyncClient) -> None:
    response = await http.post(PATH, headers=GOOG, json=body("a fox emulator:unsafe"))
    assert response.status_code == 200
    candidate = response.json()["candidates"][0]
    assert candidate["finishReason"] == "IMAGE_SAFETY"
    assert [list(part) for part in candidate["content"]["parts"]] == [["text"]]


@pytest.mark.parametrize(
    ("document", "mentions"),
    [
        (body(config={"imageConfig": {"aspectRatio": "5:1"}}), "aspectRatio"),
        (body(config={"imageConfig": {"imageSize": "8K"}}), "imageSize"),
        (body(config={"imageConfig": {"imageSize": "1k"}}), "imageSize"),
        (body(config={"responseModalities": ["AUDIO"]}), "responseModalities"),
        (body(config={"responseModalities": []}), "responseModalities"),
        (body(extra_parts=[{"inlineData": {"mimeType": "image/gif", "data": png_b64()}}]), "mimeType"),
        (body(extra_parts=[{"inlineData": {"mimeType": "image/png", "data": "***"}}]), "base64"),
    ],
)
async def test_invalid_argument(http: httpx.AsyncClient, document: dict[str, Any], mentions: str) -> None:
    response = await http.post(PATH, headers=GOOG, json=document)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert mentions in error["message"]


async def test_per_model_lists_narrow_what_is_accepted(http: httpx.AsyncClient, state: EmulatorState) -> None:
    state.models[MODEL].options.update({"aspect_ratios": ["1:1"], "image_sizes": ["1K"]})
    wide = await http.post(PATH, headers=GOOG, json=body(config={"imageConfig": {"aspectRatio": "16:9"}}))
    big = await http.post(PATH, headers=GOOG, json=body(config={"imageConfig": {"imageSize": "2K"}}))
    assert wide.status_code == big.status_code == 400


async def test_auth_uses_the_goog_header(http: httpx.AsyncClient) -> None:
    response = await http.post(PATH, headers=bearer(), json=body())
    assert response.status_code == 401
    assert response.json()["error"]["status"] == "UNAUTHENTICATED"
