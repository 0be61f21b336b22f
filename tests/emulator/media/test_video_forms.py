"""POST /v2/videos as multipart form data (what the OpenAI SDK sends), beside the JSON body."""

from __future__ import annotations

import base64
import io
from decimal import Decimal
from typing import Any

import httpx
import pytest
from PIL import Image

from relaybatch.emulator.codecs.images import sniff_image
from relaybatch.emulator.state import EmulatorState
from tests.emulator.emulator_http import bearer, charges

MODEL = "relay-video-2"


def picture(image_format: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, format=image_format)
    return buffer.getvalue()


async def create_form(
    http: httpx.AsyncClient, fields: dict[str, Any], files: dict[str, Any] | None = None
) -> httpx.Response:
    # httpx sends multipart/form-data whenever files are given; an empty dict would send urlencoded.
    return await http.post("/v2/videos", headers=bearer(), data=fields, files=files or {"": ("", b"")})


async def test_form_fields_are_read_like_the_json_body(http: httpx.AsyncClient, state: EmulatorState) -> None:
    form = {"model": MODEL, "prompt": "waves", "seconds": "8", "size": "1280x720"}
    response = await http.post("/v2/videos", headers=bearer(), data=form, files={"x": ("x.bin", b"abc")})
    # An empty file part named anything but input_reference is refused, field named.
    assert (
        response.status_code == 400 and "'x' cannot be a file upload" in response.json()["error"]["message"]
    )
    multipart = await http.post(
        "/v2/videos",
        headers={**bearer(), "Content-Type": "multipart/form-data; boundary=b"},
        content=b"".join(
            f'--b\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
            for name, value in form.items()
        )
        + b"--b--\r\n",
    )
    assert multipart.status_code == 200, multipart.text
    video = multipart.json()
    assert (video["model"], video["seconds"], video["size"], video["prompt"]) == (
        MODEL,
        "8",
        "1280x720",
        "waves",
    )
    assert [charge.usd for charge in charges(state, "/v2/videos")] == [Decimal("0.10") * 8]


@pytest.mark.parametrize("image_format", ["PNG", "JPEG", "WEBP"])
async def test_an_uploaded_reference_image_is_accepted(http: httpx.AsyncClient, image_format: str) -> None:
    data = picture(image_format)
    files = {"input_reference": ("first-frame", data, "application/octet-stream")}
    response = await create_form(http, {"model": MODEL, "prompt": "waves"}, files)
    assert response.status_code == 200, response.text
    assert sniff_image(data) == f"image/{image_format.lower()}"


@pytest.mark.parametrize(
    ("fields", "files", "mentions"),
    [
        (
            {"prompt": "waves", "model": MODEL},
            {"input_reference": ("a.gif", picture("GIF"), "image/gif")},
            "PNG, JPEG or WebP",
        ),
        ({"prompt": "waves", "model": MODEL, "input_reference[file_id]": "file_1"}, None, "no files API"),
        ({"prompt": "waves", "model": MODEL, "input_reference[other]": "x"}, None, "image_url"),
        ({"prompt": "waves", "model": MODEL, "aspect_ratio": "16:9"}, None, "V2 video schema"),
        ({"prompt": "waves", "model": MODEL, "seconds": "5"}, None, "seconds"),
        ({"prompt": "waves", "model": MODEL, "audio": "yes"}, None, "'audio' must be true or false"),
        ({"prompt": "waves", "model": MODEL, "size": ["720x1280", "1280x720"]}, None, "more than once"),
        ({"model": MODEL}, None, "prompt"),
    ],
)
async def test_bad_forms_are_400_naming_the_field_and_free(
    http: httpx.AsyncClient,
    state: EmulatorState,
    fields: dict[str, Any],
    files: dict[str, Any] | None,
    mentions: str,
) -> None:
    response = await create_form(http, fields, files)
    assert response.status_code == 400, response.text
    assert mentions in response.json()["error"]["message"]
    assert charges(state, "/v2/videos") == []


async def test_reference_by_image_url_in_a_form_and_as_a_json_object(http: httpx.AsyncClient) -> None:
    url = "data:image/png;base64," + base64.b64encode(picture("PNG")).decode()
    form = await create_form(http, {"model": MODEL, "prompt": "p", "input_reference[image_url]": url})
    assert form.status_code == 200, form.text
    as_object = await http.post(
        "/v2/videos",
        headers=bearer(),
        json={"model": MODEL, "prompt": "p", "input_reference": {"image_url": url}},
    )
    assert as_object.status_code == 200, as_object.text
    not_data = await create_form(
        http, {"model": MODEL, "prompt": "p", "input_reference[image_url]": "https://x/a.png"}
    )
    assert not_data.status_code == 400 and "data URL" in not_data.json()["error"]["message"]


async def test_audio_true_in_a_form_bills_the_with_audio_price(http: httpx.AsyncClient) -> None:
    response = await create_form(
        http, {"model": "relay-video-2-pro", "prompt": "p", "seconds": "4", "audio": "true"}
    )
    assert Decimal(response.json()["quote_usd"]) == Decimal("0.50") * 4


async def test_a_malformed_form_is_one_400(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v2/videos",
        headers={**bearer(), "Content-Type": "multipart/form-data"},  # no boundary
        content=b"--x\r\nnot a part",
    )
    assert response.status_code == 400
    assert "form body could not be read" in response.json()["error"]["message"]


async def test_the_openai_sdk_path_under_v1_points_to_v2(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/videos", headers=bearer(), json={"model": MODEL, "prompt": "p"})
    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert "no route POST /v1/videos" in message and "/v2/videos" in message and "base_url" in message
