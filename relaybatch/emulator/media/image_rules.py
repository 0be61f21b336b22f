"""POST /v1/images/generations: the field table's rules, resolved values and token usage.

Pure functions only; the route in ``image_route.py`` adds auth, billing, bytes and padding.
Per-model behaviour comes from the catalog entry's ``options`` (docs/emulator.md, "Media, judgment
and search"): ``qualities`` (the newer models list ``xhigh`` and ``max``), ``revised_prompt`` (the
one older model that rewrites prompts), ``auto_quality`` and ``upstream_seconds``.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, cast

from relaybatch.emulator.codecs.images import ImageFormat
from relaybatch.emulator.parsing import required_text, unknown_fields
from relaybatch.emulator.problems import InvalidRequest

MAX_PROMPT_CHARS = 32_000
GRID_SIZES = ("1024x1024", "1536x1024", "1024x1536")
BASE_QUALITIES = ("low", "medium", "high", "auto")
NEWER_QUALITIES = ("xhigh", "max")
LEGACY_QUALITIES = ("standard", "hd")
BACKGROUNDS = ("transparent", "opaque", "auto")
OUTPUT_FORMATS = ("png", "jpeg", "webp")
MODERATIONS = ("low", "auto")
KNOWN_FIELDS = frozenset(
    {
        "prompt",
        "model",
        "n",
        "size",
        "quality",
        "background",
        "output_format",
        "output_compression",
        "moderation",
        "user",
        "response_format",
        "stream",
    }
)
# Output image tokens of one 1024x1024 image per quality (the public analogue's published table for
# low/medium/high; xhigh and max are the emulator's assumption: each doubles the step before it).
TOKENS_PER_MEGAPIXEL_IMAGE: dict[str, int] = {
    "low": 272,
    "medium": 1056,
    "high": 4160,
    "xhigh": 8320,
    "max": 16640,
}
_CUSTOM_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")


@dataclass(frozen=True)
class ImageModelTraits:
    """Per-model behaviour from the catalog entry's ``options``."""

    qualities: tuple[str, ...] = BASE_QUALITIES
    revised_prompt: bool = False
    auto_quality: str = "medium"

    @property
    def newer(self) -> bool:
        return any(quality in self.qualities for quality in NEWER_QUALITIES)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ImageModelTraits:
        qualities = tuple(str(q) for q in options.get("qualities", BASE_QUALITIES))
        if options.get("newer"):
            qualities = tuple(dict.fromkeys(qualities + NEWER_QUALITIES))
        return cls(
            # Legacy values are refused whatever a config lists: the gateway no longer takes them.
            qualities=tuple(q for q in qualities if q not in LEGACY_QUALITIES),
            revised_prompt=bool(options.get("revised_prompt", False)),
            auto_quality=str(options.get("auto_quality", "medium")),
        )


@dataclass(frozen=True)
class ImageRequest:
    """A validated request with every ``auto`` resolved to what the response reports."""

    model: str
    prompt: str
    n: int
    width: int
    height: int
    quality: str
    background: str
    output_format: ImageFormat
    output_compression: int
    moderation: str
    user: str | None

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"


def _choice(body: dict[str, Any], field: str, allowed: tuple[str, ...], default: str) -> str:
    value = body.get(field, default)
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise InvalidRequest(f"'{field}' must be one of {', '.join(allowed)}; got {value!r}", param=field)
    return value


def _integer(body: dict[str, Any], field: str, low: int, high: int, default: int) -> int:
    value = body.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"'{field}' must be an integer from {low} to {high}; got {value!r}", param=field)
    return value


def parse_size(value: Any, *, max_edge: int) -> tuple[int, int]:
    """``auto`` and the grid sizes, or a custom WxH with sides divisible by 16 and aspect 1:3..3:1."""
    if value is None or value == "auto":
        return 1024, 1024
    if isinstance(value, str) and value in GRID_SIZES:
        across, _, down = value.partition("x")
        return int(across), int(down)
    match = _CUSTOM_SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidRequest(
            f"'size' must be auto, {', '.join(GRID_SIZES)} or WIDTHxHEIGHT; got {value!r}", param="size"
        )
    width, height = int(match.group(1)), int(match.group(2))
    if width <= 0 or height <= 0 or width % 16 or height % 16:
        raise InvalidRequest(f"size {value}: both sides must be positive multiples of 16", param="size")
    if width > 3 * height or height > 3 * width:
        raise InvalidRequest(f"size {value}: aspect ratio must be between 1:3 and 3:1", param="size")
    if max(width, height) > max_edge:
        raise InvalidRequest(f"size {value}: sides must be at most {max_edge} pixels", param="size")
    return width, height


def _quality(body: dict[str, Any], traits: ImageModelTraits) -> str:
    value = body.get("quality", "auto")
    if value in LEGACY_QUALITIES:
        raise InvalidRequest(
            f"quality '{value}' is a legacy value and is not accepted; use {', '.join(traits.qualities)}",
            param="quality",
        )
    if value in NEWER_QUALITIES and value not in traits.qualities:
        raise InvalidRequest(
            f"quality '{value}' is only available on the newer image models", param="quality"
        )
    quality = _choice(body, "quality", traits.qualities, "auto")
    return traits.auto_quality if quality == "auto" else quality


def validate_image_request(body: Any, *, model: str, traits: ImageModelTraits, max_edge: int) -> ImageRequest:
    """Apply every row of the interface's field table; raise InvalidRequest on the first problem."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    unknown = unknown_fields(body, KNOWN_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown field '{unknown[0]}'", param=unknown[0])
    prompt = required_text(body, "prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidRequest(
            f"'prompt' is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}", param="prompt"
        )
    if body.get("response_format", "b64_json") not in ("b64_json", None):
        raise InvalidRequest("only 'b64_json' results are returned; URLs are not", param="response_format")
    if body.get("stream") not in (None, False):
        raise InvalidRequest("streaming image generation is not supported here", param="stream")
    n = _integer(body, "n", 1, 10, 1)
    width, height = parse_size(body.get("size"), max_edge=max_edge)
    quality = _quality(body, traits)
    output_format = cast(ImageFormat, _choice(body, "output_format", OUTPUT_FORMATS, "png"))
    background = _choice(body, "background", BACKGROUNDS, "auto")
    if background == "transparent" and output_format == "jpeg":
        raise InvalidRequest(
            "background 'transparent' requires output_format 'png' or 'webp'", param="background"
        )
    if "output_compression" in body and body["output_compression"] is not None and output_format == "png":
        raise InvalidRequest(
            "'output_compression' applies only to output_format 'jpeg' or 'webp'", param="output_compression"
        )
    compression = _integer(body, "output_compression", 0, 100, 100)
    moderation = _choice(body, "moderation", MODERATIONS, "auto")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRequest("'user' must be a string", param="user")
    return ImageRequest(
        model=model,
        prompt=prompt,
        n=n,
        width=width,
        height=height,
        quality=quality,
        # "auto" resolves to opaque: the emulator draws transparency only when asked for it.
        background="transparent" if background == "transparent" else "opaque",
        output_format=output_format,
        output_compression=compression,
        moderation=moderation,
        user=user,
    )


def text_tokens(text: str) -> int:
    """The emulator's tokenizer stand-in: about four characters per token, at least one."""
    return max(1, math.ceil(len(text) / 4))


def output_image_tokens(request: ImageRequest) -> int:
    """Image tokens of one image: the quality's 1024x1024 count scaled by the pixel area."""
    per_megapixel = TOKENS_PER_MEGAPIXEL_IMAGE[request.quality]
    return max(1, math.ceil(per_megapixel * request.width * request.height / (1024 * 1024)))


def revised_prompt(request: ImageRequest) -> str:
    """The older model's rewrite: deterministic, and visibly derived from the prompt."""
    return f"A detailed, high-quality image of: {request.prompt.strip()}"


def image_usage(request: ImageRequest, traits: ImageModelTraits) -> dict[str, Any]:
    """Usage in the images shape; the older model's rewritten prompts count as output text tokens."""
    input_text = text_tokens(request.prompt)
    image_out = output_image_tokens(request) * request.n
    text_out = text_tokens(revised_prompt(request)) * request.n if traits.revised_prompt else 0
    return {
        "input_tokens": input_text,
        "input_tokens_details": {"text_tokens": input_text, "image_tokens": 0},
        "output_tokens": image_out + text_out,
        "output_tokens_details": {"image_tokens": image_out, "text_tokens": text_out},
        "total_tokens": input_text + image_out + text_out,
    }


def image_seed(request: ImageRequest, index: int) -> bytes:
    """Same request, same picture; each of the n images differs."""
    key = f"{request.model}\n{request.prompt}\n{request.size}\n{request.quality}\n{index}"
    return hashlib.sha256(key.encode()).digest()
