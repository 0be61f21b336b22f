"""The body of POST /v2/videos as a plain mapping, from JSON or from the form the OpenAI SDK sends.

``client.videos.create(...)`` of the official openai package posts ``multipart/form-data`` to
``{base_url}/videos`` (so ``base_url=.../v2`` reaches this route): text fields ``prompt``, ``model``,
``seconds``, ``size``, extra fields as strings (``audio=true``), and ``input_reference`` either as an
uploaded image file or as ``input_reference[image_url]`` / ``input_reference[file_id]``. JSON
bodies take ``input_reference`` as a data URL string or as ``{"image_url": ...}``.

Both become one mapping that ``validate_v2_body`` checks, so the two encodings obey the same rules:
an uploaded image is sniffed (PNG, JPEG or WebP) and carried on as a data URL.
"""

from __future__ import annotations

import base64
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from relaybatch.emulator.codecs.images import sniff_image
from relaybatch.emulator.media.video_pricing import AUDIO_FIELD
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import json_object

REFERENCE = "input_reference"
# The largest reference image accepted (the interface gives no bound; the public analogue's
# upload limit is far above what a first frame needs).
MAX_REFERENCE_BYTES = 20 * 1024 * 1024
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
# Starlette's own guards against a hostile form: parts, fields and the size of one text field.
MAX_FORM_FILES = 1
MAX_FORM_FIELDS = 32
MAX_FIELD_BYTES = 256 * 1024


def _reference_object(value: dict[str, Any]) -> str:
    """``{"image_url": ...}`` -> the URL; ``file_id`` is refused (the emulator has no files API)."""
    if value.get("file_id") is not None:
        raise InvalidRequest(
            "'input_reference.file_id' is not supported by the emulator (it has no files API); "
            "upload the image or send input_reference.image_url as a data URL",
            param=REFERENCE,
        )
    unknown = sorted(set(value) - {"image_url", "file_id"})
    if unknown or not isinstance(value.get("image_url"), str):
        raise InvalidRequest("'input_reference' takes 'image_url' (a data URL)", param=REFERENCE)
    url: str = value["image_url"]
    return url


async def _uploaded_reference(upload: UploadFile) -> str:
    data = await upload.read(MAX_REFERENCE_BYTES + 1)
    if len(data) > MAX_REFERENCE_BYTES:
        raise InvalidRequest(
            f"'input_reference' is larger than {MAX_REFERENCE_BYTES // (1024 * 1024)} MB", param=REFERENCE
        )
    mime = sniff_image(data)
    if mime is None:
        raise InvalidRequest(
            f"'input_reference' ({upload.filename or 'upload'}) is not a PNG, JPEG or WebP image",
            param=REFERENCE,
        )
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _form_flag(name: str, value: str) -> bool:
    if value in ("true", "false"):
        return value == "true"
    raise InvalidRequest(f"'{name}' must be true or false; got {value!r}", param=name)


async def _form_body(request: Request) -> dict[str, Any]:
    body: dict[str, Any] = {}
    reference: dict[str, Any] = {}
    seen: set[str] = set()
    async with request.form(
        max_files=MAX_FORM_FILES, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FIELD_BYTES
    ) as form:
        for name, value in form.multi_items():
            if name in seen:
                raise InvalidRequest(f"field '{name}' is given more than once", param=name)
            seen.add(name)
            if isinstance(value, UploadFile):
                if name != REFERENCE:
                    raise InvalidRequest(f"field '{name}' cannot be a file upload", param=name)
                body[name] = await _uploaded_reference(value)
            elif name.startswith(REFERENCE + "[") and name.endswith("]"):
                reference[name[len(REFERENCE) + 1 : -1]] = value
            elif value == "":
                body[name] = None  # an empty field is "not given", as a JSON null is
            else:
                body[name] = _form_flag(name, value) if name == AUDIO_FIELD else value
    if reference:
        if REFERENCE in body:
            raise InvalidRequest("'input_reference' is given twice (a file and a reference)", param=REFERENCE)
        body[REFERENCE] = _reference_object(reference)
    return body


async def read_v2_body(request: Request) -> dict[str, Any]:
    """The create body as a mapping, from JSON or a form; InvalidRequest for anything else."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type in FORM_TYPES:
        try:
            return await _form_body(request)
        except (HTTPException, MultiPartException) as error:  # malformed, or over a limit above
            detail = getattr(error, "detail", None) or getattr(error, "message", None) or str(error)
            raise InvalidRequest(f"the form body could not be read: {detail}") from None
    body = await json_object(request)
    if isinstance(body.get(REFERENCE), dict):
        body[REFERENCE] = _reference_object(body[REFERENCE])
    return body
