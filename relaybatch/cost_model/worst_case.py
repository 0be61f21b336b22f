"""The most a call can cost, before it is sent: what a budget reserves.

Bounds, per kind (all in the call's own prices, at the dearest rate a token could be billed at):
- input tokens: at most the UTF-8 byte length of the request body (a token is at least one byte);
- output tokens: the request's cap (`max_tokens`, `max_completion_tokens`, `max_output_tokens`,
  `generationConfig.maxOutputTokens`), or ``DEFAULT_OUTPUT_TOKEN_CAP`` when the request sets none;
- images: ``n`` images, each at most the public per-quality token table scaled to its size;
- video: the requested seconds (V2 default 4, V1 default 5) at the dearer per-second price;
- typed judgment: input bound at 0.042 USD per million; web search: 0.05 USD.
``None`` means the call cannot be bounded (a price it may need is unknown).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from relaybatch.cost_model.pricing import ModelPrices, judgment_prices, web_search_prices
from relaybatch.cost_model.usage import seconds_value
from relaybatch.kinds import TEXT_KINDS, VIDEO_KINDS, VIDEO_V1, WEB_SEARCH

# A request without an output cap could in principle run to the model's context limit; this is
# the assumption the reservation makes instead. Set an explicit cap on budgeted jobs to be exact.
DEFAULT_OUTPUT_TOKEN_CAP = 16_384
V2_DEFAULT_SECONDS = Decimal(4)
V1_DEFAULT_SECONDS = Decimal(5)
# Output image tokens of one 1024x1024 image per quality: the public image API's table for
# low/medium/high; xhigh and max (newest models only) assumed to double the step before.
IMAGE_TOKENS_PER_MEGAPIXEL = {"low": 272, "medium": 1056, "high": 4160, "xhigh": 8320, "max": 16640}
LARGEST_STANDARD_SIZE = (1536, 1024)
# Priced per token: the text kinds.
TOKEN_KINDS = TEXT_KINDS


def request_bytes(request: Mapping[str, Any]) -> int:
    return len(json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def output_cap(kind: str, request: Mapping[str, Any]) -> int:
    if kind == "generate_content":
        config = request.get("generationConfig")
        value = config.get("maxOutputTokens") if isinstance(config, Mapping) else None
    elif kind == "responses":
        value = request.get("max_output_tokens")
    else:
        value = request.get("max_completion_tokens") or request.get("max_tokens")
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and value > 0
        else DEFAULT_OUTPUT_TOKEN_CAP
    )


def _dearest(prices: Iterable[Decimal | None]) -> Decimal | None:
    """The highest of the prices a token may be billed at; None if any of them is unknown."""
    values = list(prices)
    if any(value is None for value in values):
        return None
    return max((value for value in values if value is not None), default=Decimal(0))


def _token_rates(prices: ModelPrices, *, input_side: bool, include_images: bool) -> Decimal | None:
    texts = [prices.text] + ([prices.over_200k_text] if prices.over_200k_text else [])
    caches = [prices.cache] + ([prices.over_200k_cache] if prices.over_200k_cache else [])
    if input_side:
        # A prompt token may come back as uncached input, a cache write or a cache read.
        rates = [text.prompt for text in texts]
        rates += [value for cache in caches for value in (cache.read, cache.write, cache.write_1h) if value]
        if include_images and prices.input_image is not None:
            rates.append(prices.input_image)
    else:
        rates = [text.completion for text in texts]
        rates += [text.internal_reasoning for text in texts if text.internal_reasoning is not None]
        if include_images and prices.output_image is not None:
            rates.append(prices.output_image)
    return _dearest(rates)


def _token_call(kind: str, request: Mapping[str, Any], prices: ModelPrices) -> Decimal | None:
    images = kind == "generate_content"  # generate-content may answer with image tokens
    input_rate = _token_rates(prices, input_side=True, include_images=images)
    output_rate = _token_rates(prices, input_side=False, include_images=images)
    if input_rate is None or output_rate is None:
        return None
    return request_bytes(request) * input_rate + output_cap(kind, request) * output_rate


def _image_size(request: Mapping[str, Any]) -> tuple[int, int]:
    size = str(request.get("size") or "auto")
    width, _, height = size.partition("x")
    if width.isdigit() and height.isdigit():
        return int(width), int(height)
    return LARGEST_STANDARD_SIZE


def image_tokens_bound(request: Mapping[str, Any]) -> int:
    quality = str(request.get("quality") or "auto")
    per_megapixel = IMAGE_TOKENS_PER_MEGAPIXEL.get(quality, max(IMAGE_TOKENS_PER_MEGAPIXEL.values()))
    width, height = _image_size(request)
    return math.ceil(per_megapixel * width * height / (1024 * 1024))


def _image_call(request: Mapping[str, Any], prices: ModelPrices) -> Decimal | None:
    n = request.get("n")
    count = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    if prices.kind == "generation":
        return None if prices.per_image is None else count * prices.per_image
    input_rate = _token_rates(prices, input_side=True, include_images=True)
    # Image tokens must be priced; a text rate only matters for models that rewrite the prompt.
    known_text = [rate for rate in (prices.text.completion,) if rate is not None]
    output_rate = _dearest([prices.output_image, *known_text])
    if input_rate is None or output_rate is None:
        return None
    # Output: every image at its bound, plus room for a rewritten prompt as long as the request.
    output_tokens = count * (image_tokens_bound(request) + request_bytes(request))
    return request_bytes(request) * input_rate + output_tokens * output_rate


def _video_call(kind: str, request: Mapping[str, Any], prices: ModelPrices) -> Decimal | None:
    default = V1_DEFAULT_SECONDS if kind == VIDEO_V1 else V2_DEFAULT_SECONDS
    seconds = seconds_value(request.get("seconds") or request.get("duration"), default) or default
    known = [
        rate for rate in (prices.video_per_second, prices.video_per_second_with_audio) if rate is not None
    ]
    return seconds * max(known) if known else None


def worst_case_usd(kind: str, request: Mapping[str, Any], prices: ModelPrices | None) -> Decimal | None:
    """The most this call can be charged, or None when that cannot be known."""
    if kind == WEB_SEARCH:
        return web_search_prices("search").per_request
    if kind == "judgment":
        return _token_call(kind, request, judgment_prices(str(request.get("model"))))
    if prices is None:
        return None
    if kind in TOKEN_KINDS:
        return _token_call(kind, request, prices)
    if kind == "image":
        return _image_call(request, prices)
    if kind in VIDEO_KINDS:
        return _video_call(kind, request, prices)
    return None
