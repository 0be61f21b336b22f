"""Image models on the generate-content route: ``inlineData`` parts beside text.

The text routes (``text/image_reply.py``) call :func:`plan_image_reply` for models of
``kind: image`` (docs/emulator.md, seam 6); this module decides what the model answers:

- ``generationConfig.imageConfig{aspectRatio, imageSize}``: values outside the model's lists
  (options ``aspect_ratios`` / ``image_sizes``; defaults are public-facts.md's lists) are
  ``INVALID_ARGUMENT``; so are unknown ``responseModalities`` and unsupported ``inlineData`` types.
- ``responseModalities``: ``["TEXT", "IMAGE"]`` (the default) gives a text part and an image part,
  ``["IMAGE"]`` the image alone, ``["TEXT"]`` text alone.
- Safety trigger: a prompt containing ``emulator:unsafe`` is refused: 200, finishReason
  ``IMAGE_SAFETY``, one text part, no image.
- Tokens: prompt text about four characters a token, 258 per input image, and per output image the
  model's ``image_tokens`` for its imageSize (default 1K/2K 1120, 4K 2000, the public analogue's table).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from relaybatch.emulator.codecs.images import render_image
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.media.store import SAFETY_TRIGGER, has_trigger
from relaybatch.emulator.problems import InvalidRequest

ASPECT_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "9:16", "16:9", "21:9")
IMAGE_SIZES = ("1K", "2K", "4K")
EDGE_PIXELS = {"1K": 1024, "2K": 2048, "4K": 4096}
DEFAULT_IMAGE_TOKENS = {"1K": 1120, "2K": 1120, "4K": 2000}
INPUT_IMAGE_TOKENS = 258
INPUT_MIME_TYPES = ("image/png", "image/jpeg", "image/webp")
MODALITIES = ("TEXT", "IMAGE")
SAFETY_FINISH = "IMAGE_SAFETY"


@dataclass(frozen=True)
class ImageReplyPlan:
    """What an image model answers; the core renders it and bills ``*_tokens``."""

    text: str | None
    images: list[tuple[str, str]] = field(default_factory=list)  # (mime type, base64 data)
    finish: str = "stop"
    input_text_tokens: int = 0
    input_image_tokens: int = 0
    output_text_tokens: int = 0
    output_image_tokens: int = 0


@dataclass(frozen=True)
class _Prompt:
    text: str
    input_images: int


def _last_user_prompt(body: dict[str, Any]) -> _Prompt:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise InvalidRequest("'contents' must be a non-empty array of turns", param="contents")
    turn = contents[-1]
    parts = turn.get("parts") if isinstance(turn, dict) else None
    if not isinstance(parts, list) or not parts:
        raise InvalidRequest("the last turn must have a non-empty 'parts' array", param="contents")
    texts, images = [], 0
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("inlineData"), dict):
            _check_inline(part["inlineData"])
            images += 1
        else:
            raise InvalidRequest("each part needs 'text' or 'inlineData{mimeType,data}'", param="contents")
    return _Prompt("\n".join(texts), images)


def _check_inline(inline: dict[str, Any]) -> None:
    mime = inline.get("mimeType")
    if mime not in INPUT_MIME_TYPES:
        raise InvalidRequest(
            f"unsupported inlineData mimeType {mime!r}; image models take {', '.join(INPUT_MIME_TYPES)}",
            param="contents",
        )
    try:
        base64.b64decode(str(inline.get("data", "")), validate=True)
    except binascii.Error:
        raise InvalidRequest("inlineData.data is not valid base64", param="contents") from None


def _allowed(model: ModelConfig, option: str, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(str(value) for value in model.options.get(option, default))


def _image_config(model: ModelConfig, config: dict[str, Any]) -> tuple[str, str]:
    image_config = config.get("imageConfig") or {}
    if not isinstance(image_config, dict):
        raise InvalidRequest("generationConfig.imageConfig must be an object")
    ratios = _allowed(model, "aspect_ratios", ASPECT_RATIOS)
    sizes = _allowed(model, "image_sizes", IMAGE_SIZES)
    ratio = image_config.get("aspectRatio", "1:1")
    if ratio not in ratios:
        raise InvalidRequest(
            f"imageConfig.aspectRatio {ratio!r} is not accepted by {model.id}; use one of {', '.join(ratios)}"
        )
    size = image_config.get("imageSize", sizes[0])
    if size not in sizes:
        raise InvalidRequest(
            f"imageConfig.imageSize {size!r} is not accepted by {model.id}; use one of {', '.join(sizes)}"
        )
    return ratio, size


def _modalities(config: dict[str, Any]) -> set[str]:
    raw = config.get("responseModalities", list(MODALITIES))
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("generationConfig.responseModalities must be a non-empty array")
    values = {str(value).upper() for value in raw}
    unknown = values - set(MODALITIES)
    if unknown:
        raise InvalidRequest(f"unsupported responseModalities value {sorted(unknown)[0]!r}")
    return values


def pixel_size(ratio: str, size: str) -> tuple[int, int]:
    """Width and height for an aspect ratio at an imageSize: about EDGE^2 pixels, multiples of 16."""
    across, down = (int(side) for side in ratio.split(":"))
    edge = EDGE_PIXELS[size]
    width = edge * math.sqrt(across / down)
    return int(round(width / 16) * 16), int(round(edge * edge / width / 16) * 16)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


def plan_image_reply(model: ModelConfig, body: dict[str, Any], *, max_edge: int = 256) -> ImageReplyPlan:
    """The answer of an image model to a generate-content body; raises InvalidRequest."""
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("generationConfig must be an object")
    prompt = _last_user_prompt(body)
    ratio, size = _image_config(model, config)
    modalities = _modalities(config)
    input_text = _tokens(prompt.text)
    input_images = prompt.input_images * INPUT_IMAGE_TOKENS
    if has_trigger(prompt.text, SAFETY_TRIGGER):
        refusal = "I can't create that image: the request was flagged by the image safety filter."
        return ImageReplyPlan(refusal, [], SAFETY_FINISH, input_text, input_images, _tokens(refusal), 0)
    text = f"Here is the image you asked for ({ratio}, {size})." if "TEXT" in modalities else None
    images: list[tuple[str, str]] = []
    image_tokens = 0
    if "IMAGE" in modalities:
        width, height = pixel_size(ratio, size)
        seed = hashlib.sha256(f"{model.id}\n{prompt.text}\n{ratio}\n{size}".encode()).digest()
        png = render_image(width, height, seed=seed, output_format="png", max_edge=max_edge)
        images.append(("image/png", base64.b64encode(png).decode("ascii")))
        token_table = {**DEFAULT_IMAGE_TOKENS, **model.options.get("image_tokens", {})}
        image_tokens = int(token_table[size])
    return ImageReplyPlan(text, images, "stop", input_text, input_images, _tokens(text or ""), image_tokens)
