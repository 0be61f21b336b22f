"""What a call is expected to consume, before it is sent: the plan's side of the one cost model.

The plan prices these counts with ``price_call``, the same function the ledger prices real usage
with, and bounds each call with ``worst_case_usd``, the same bound the budget reserves: one model,
three uses. The counts follow the public tokenizer conventions (docs/costs.md, "Plan estimates"):

- text: about four characters a token, plus 3 tokens per turn; tool definitions as their JSON;
- inline input images: 258 tokens each on generate-content (the public fixed count); on messages
  width x height / 750 (at most 1,600); on chat and responses 85 + 170 per 512-pixel tile (85 at
  `detail: low`); 1,000 when the picture is a link whose size is unknown;
- output text: the request's cap, but at most ``EXPECTED_ANSWER_TOKENS`` (an answer rarely fills
  its cap; the worst case still assumes it does); a structured answer (``output_schema``): the JSON
  of a typical answer that fits the requested schema (``structured.typical_answer``);
- generate-content images out: the public per-``imageSize`` token table (1K and 2K: 1,120; 4K: 2,000);
- images route: ``n`` x the per-quality token table scaled to the size (``auto`` = medium, 1024x1024),
  or ``n`` x the per-image price;
- video: the requested seconds (V2 default 4, V1 default 5), with audio when the request asks;
- typed judgment: the JSON of ``state`` and ``questions`` at four characters a token.

What no estimate can know is named, never assumed: cache hits (priced as uncached input, so the
estimate errs high), and reasoning tokens (a reasoning model thinks beyond its visible answer).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from PIL import Image

from relaybatch.cost_model.pricing import ModelPrices
from relaybatch.cost_model.usage import UsageCounts, seconds_value
from relaybatch.cost_model.worst_case import (
    IMAGE_TOKENS_PER_MEGAPIXEL,
    TOKEN_KINDS,
    V1_DEFAULT_SECONDS,
    V2_DEFAULT_SECONDS,
    output_cap,
)
from relaybatch.kinds import VIDEO_KINDS, VIDEO_V1, WEB_SEARCH
from relaybatch.structured import requested_schema, typical_answer

CHARS_PER_TOKEN = 4
TOKENS_PER_TURN = 3
# A typical answer; an uncapped request is expected to stop there too (its worst case does not).
EXPECTED_ANSWER_TOKENS = 40
GEMINI_INLINE_IMAGE_TOKENS = 258
OTHER_INLINE_IMAGE_TOKENS = 1000  # a linked picture whose size is not known before the call
ANTHROPIC_MAX_IMAGE_TOKENS = 1600
OPENAI_BASE_IMAGE_TOKENS = 85
OPENAI_TILE_TOKENS = 170
GEMINI_IMAGE_OUTPUT_TOKENS = {"1K": 1120, "2K": 1120, "4K": 2000}
# The short caption an image model writes beside its picture when TEXT is asked for too.
IMAGE_CAPTION_TOKENS = 12
EXPECTED_IMAGE_QUALITY = "medium"
EXPECTED_IMAGE_SIZE = (1024, 1024)
# Request flags that ask for a soundtrack (the interface names none; these are the common ones).
AUDIO_FLAGS = ("audio", "with_audio", "generate_audio")
# Keys whose strings are not prompt text (names, roles, ids, base64 payloads).
_NOT_TEXT = frozenset(
    {"model", "role", "type", "mimeType", "mime_type", "media_type", "data", "url", "image_url", "id"}
)
CACHE_UNKNOWN = "cache hits (priced as uncached input)"
REASONING_UNKNOWN = "reasoning tokens (not included)"


@dataclass(frozen=True)
class Expected:
    """The expected counts of one call, and what the estimate could not know about it."""

    usage: UsageCounts
    unknowns: tuple[str, ...] = ()


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _text(value: Any, key: str = "") -> str:
    """Every prompt string inside a turn's content, joined (images and names are not text)."""
    if isinstance(value, str):
        return "" if key in _NOT_TEXT or value.startswith("data:") else value
    if isinstance(value, Mapping):
        return "".join(_text(inner, name) for name, inner in value.items())
    if isinstance(value, list):
        return "".join(_text(inner, key) for inner in value)
    return ""


def _image_parts(value: Any) -> list[Mapping[str, Any]]:
    """Every inline image part of a request, in any family's spelling."""
    if isinstance(value, Mapping):
        own = "inlineData" in value or "inline_data" in value
        own = own or value.get("type") in ("image_url", "input_image", "image")
        return ([value] if own else []) + [p for inner in value.values() for p in _image_parts(inner)]
    if isinstance(value, list):
        return [part for inner in value for part in _image_parts(inner)]
    return []


def _image_bytes(part: Mapping[str, Any]) -> bytes | None:
    """The picture of an inline image part, when it is sent inline (not a link)."""
    inline = part.get("inlineData") or part.get("inline_data") or part.get("source") or {}
    data = inline.get("data") if isinstance(inline, Mapping) else None
    if data is None:
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        data = url.partition(",")[2] if isinstance(url, str) and url.startswith("data:") else None
    try:
        return base64.b64decode(data, validate=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError):
        return None


def _dimensions(picture: bytes | None) -> tuple[int, int] | None:
    if picture is None:
        return None
    try:
        with Image.open(io.BytesIO(picture)) as image:  # reads the header only
            return image.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def input_image_tokens(kind: str, part: Mapping[str, Any]) -> int:
    """The public per-family token count of one input image (docs/costs.md)."""
    if kind == "generate_content":
        return GEMINI_INLINE_IMAGE_TOKENS
    size = _dimensions(_image_bytes(part))
    if size is None:
        return OTHER_INLINE_IMAGE_TOKENS
    width, height = size
    if kind == "messages":
        return min(ANTHROPIC_MAX_IMAGE_TOKENS, max(1, math.ceil(width * height / 750)))
    link = part.get("image_url")
    if "low" in (part.get("detail"), link.get("detail") if isinstance(link, Mapping) else None):
        return OPENAI_BASE_IMAGE_TOKENS
    # Fit in 2048x2048, then the short side to 768; 170 tokens per 512-pixel tile plus 85.
    fit = min(1.0, 2048 / max(width, height))
    scale = fit * min(1.0, 768 / (min(width, height) * fit))
    tiles = math.ceil(width * scale / 512) * math.ceil(height * scale / 512)
    return OPENAI_BASE_IMAGE_TOKENS + OPENAI_TILE_TOKENS * tiles


def _turns(kind: str, request: Mapping[str, Any]) -> list[Any]:
    """The turns of a text request, system instructions included, as each family spells them."""
    if kind == "chat":
        return list(request.get("messages") or [])
    if kind == "messages":
        system = [request["system"]] if request.get("system") else []
        return system + list(request.get("messages") or [])
    if kind == "responses":
        instructions = [request["instructions"]] if request.get("instructions") else []
        given = request.get("input")
        return instructions + (list(given) if isinstance(given, list) else [given or ""])
    instruction = request.get("systemInstruction") or request.get("system_instruction")
    return ([instruction] if instruction else []) + list(request.get("contents") or [])


def prompt_tokens(kind: str, request: Mapping[str, Any]) -> int:
    turns = _turns(kind, request)
    tokens = sum(text_tokens(_text(turn)) + TOKENS_PER_TURN for turn in turns)
    for tool in request.get("tools") or []:
        tokens += text_tokens(json.dumps(tool, sort_keys=True))
    return max(1, tokens)


def _modalities(request: Mapping[str, Any]) -> set[str]:
    config = request.get("generationConfig")
    given = config.get("responseModalities") if isinstance(config, Mapping) else None
    return {str(name).upper() for name in given} if isinstance(given, list) else set()


def _image_size(request: Mapping[str, Any]) -> str:
    config = request.get("generationConfig")
    image = config.get("imageConfig") if isinstance(config, Mapping) else None
    size = image.get("imageSize") if isinstance(image, Mapping) else None
    return str(size) if size in GEMINI_IMAGE_OUTPUT_TOKENS else "1K"


def _answer_tokens(kind: str, request: Mapping[str, Any]) -> int:
    schema = requested_schema(kind, request)
    if schema is None:
        return EXPECTED_ANSWER_TOKENS
    return text_tokens(json.dumps(typical_answer(schema), separators=(",", ":")))


def _token_call(kind: str, request: Mapping[str, Any], prices: ModelPrices | None) -> Expected:
    images_in = sum(input_image_tokens(kind, part) for part in _image_parts(_turns(kind, request)))
    output_images = 0
    answer = min(output_cap(kind, request), _answer_tokens(kind, request))
    if kind == "generate_content" and "IMAGE" in _modalities(request):
        output_images = GEMINI_IMAGE_OUTPUT_TOKENS[_image_size(request)]
        answer = IMAGE_CAPTION_TOKENS if "TEXT" in _modalities(request) else 0
    image_priced = prices is not None and prices.input_image is not None
    usage = UsageCounts(
        # Without an image-token price the gateway bills image tokens as input (the shared rule).
        input_tokens=prompt_tokens(kind, request) + (0 if image_priced else images_in),
        input_image_tokens=images_in if image_priced else 0,
        output_tokens=answer,
        output_image_tokens=output_images,
    )
    unknowns = []
    if prices is not None and (prices.cache.read is not None or prices.cache.write is not None):
        unknowns.append(CACHE_UNKNOWN)
    if prices is not None and prices.text.internal_reasoning is not None:
        unknowns.append(REASONING_UNKNOWN)
    return Expected(usage, tuple(unknowns))


def image_tokens(quality: str, width: int, height: int) -> int:
    per_megapixel = IMAGE_TOKENS_PER_MEGAPIXEL[quality]
    return max(1, math.ceil(per_megapixel * width * height / (1024 * 1024)))


def _image_call(request: Mapping[str, Any]) -> Expected:
    n = request.get("n")
    count = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    quality = str(request.get("quality") or "auto")
    if quality not in IMAGE_TOKENS_PER_MEGAPIXEL:
        quality = EXPECTED_IMAGE_QUALITY
    width, _, height = str(request.get("size") or "auto").partition("x")
    size = (int(width), int(height)) if width.isdigit() and height.isdigit() else EXPECTED_IMAGE_SIZE
    usage = UsageCounts(
        input_tokens=max(1, text_tokens(str(request.get("prompt") or ""))),
        output_image_tokens=count * image_tokens(quality, *size),
        images=count,
    )
    return Expected(usage)


def with_audio(request: Mapping[str, Any]) -> bool:
    return any(request.get(flag) is True for flag in AUDIO_FLAGS)


def video_seconds(kind: str, request: Mapping[str, Any]) -> Decimal:
    default = V1_DEFAULT_SECONDS if kind == VIDEO_V1 else V2_DEFAULT_SECONDS
    return seconds_value(request.get("seconds") or request.get("duration"), default) or default


def _video_call(kind: str, request: Mapping[str, Any]) -> Expected:
    seconds = video_seconds(kind, request)
    if with_audio(request):
        return Expected(UsageCounts(video_seconds_with_audio=seconds))
    return Expected(UsageCounts(video_seconds=seconds))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _judgment_call(request: Mapping[str, Any]) -> Expected:
    questions = request.get("questions") or {}
    text = _canonical(request.get("state")) + _canonical(questions)
    count = len(questions) if isinstance(questions, Mapping) else 0
    return Expected(UsageCounts(input_tokens=max(1, text_tokens(text)), output_tokens=count))


def expected_usage(kind: str, request: Mapping[str, Any], prices: ModelPrices | None) -> Expected:
    """The counts one call of this kind is expected to be billed for (priced by ``price_call``)."""
    if kind in TOKEN_KINDS:
        return _token_call(kind, request, prices)
    if kind == "image":
        return _image_call(request)
    if kind in VIDEO_KINDS:
        return _video_call(kind, request)
    if kind == "judgment":
        return _judgment_call(request)
    if kind == WEB_SEARCH:
        return Expected(UsageCounts(requests=1))
    raise ValueError(f"no estimate for kind {kind!r}")
