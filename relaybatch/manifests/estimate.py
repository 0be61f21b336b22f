"""Cost estimates before a run: rough units per item from its request, priced by the pricing route.

Nothing billed is sent: the only calls are GET /v1/models/pricing, one per model. The estimate is a
guide, not a quote: tokens are text length / 4, output is the request's max tokens (or a default),
images and video follow n, quality, size and seconds. A call whose prompt comes out above 200k
tokens is priced at the model's over-200k tier, where it publishes one, as the gateway bills it.
Cache discounts are not assumed: which prompts will hit a cache is not known before the run, so
the estimate errs on the side of spending less than it says. Money stays Decimal throughout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relaybatch.manifests.items import Item

CHARS_PER_TOKEN = 4
# The gateway's tier boundary: a call with more prompt tokens than this is billed at the
# `tiers.over_200k` rates (the same figure as relaybatch.costs.price.TIER_THRESHOLD_TOKENS).
TIER_THRESHOLD_TOKENS = 200_000
# When a request sets no output cap, assume this many output tokens (an upper-side guess).
DEFAULT_OUTPUT_TOKENS = 1024
# A rough token count for one inline input image (about a 1024x1024 picture on most vendors).
INPUT_IMAGE_TOKENS = 1000
# Output image tokens of a 1024x1024 image per quality (the public image-model tables); `auto` is
# priced as high so the estimate errs on the side of spending less than it says.
IMAGE_OUTPUT_TOKENS = {"low": 272, "medium": 1056, "high": 4160, "auto": 4160, "xhigh": 6240, "max": 8320}
SQUARE_PIXELS = 1024 * 1024
# Output tokens of one generate-content image (a 1K image on the public image models of that family).
GENERATED_IMAGE_TOKENS = 1290
V1_DEFAULT_SECONDS = 5
V2_DEFAULT_SECONDS = 4
JUDGMENT_USD_PER_INPUT_TOKEN = Decimal("0.042") / Decimal(1_000_000)
WEB_SEARCH_USD_PER_REQUEST = Decimal("0.05")
# Keys whose strings are not prompt text (names, roles, base64 payloads).
_NOT_TEXT = {"model", "role", "type", "mimeType", "media_type", "data", "route", "url", "size", "quality"}


@dataclass
class Units:
    """What a group of items is expected to consume."""

    items: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    input_images: int = 0
    output_image_tokens: int = 0
    images: int = 0
    video_seconds: int = 0
    # The part of input_tokens and output_tokens that belongs to calls over the 200k tier.
    over_200k_input_tokens: int = 0
    over_200k_output_tokens: int = 0

    def add(self, other: Units) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class JobEstimate:
    job: str
    kind: str
    model: str
    units: Units = field(default_factory=Units)
    usd: Decimal | None = None
    note: str = ""


def _text_chars(value: Any, key: str = "") -> int:
    if isinstance(value, str):
        return 0 if key in _NOT_TEXT or value.startswith("data:") else len(value)
    if isinstance(value, dict):
        return sum(_text_chars(inner, name) for name, inner in value.items())
    if isinstance(value, list):
        return sum(_text_chars(inner, key) for inner in value)
    return 0


def _inline_images(value: Any) -> int:
    if isinstance(value, dict):
        own = (
            1 if ("inlineData" in value or value.get("type") in ("image_url", "input_image", "image")) else 0
        )
        return own + sum(_inline_images(inner) for inner in value.values())
    if isinstance(value, list):
        return sum(_inline_images(inner) for inner in value)
    return 0


def _output_cap(kind: str, request: Mapping[str, Any]) -> int:
    config = request.get("generationConfig") or {}
    for cap in (
        request.get("max_completion_tokens"),
        request.get("max_tokens"),
        request.get("max_output_tokens"),
        config.get("maxOutputTokens") if isinstance(config, dict) else None,
    ):
        if isinstance(cap, int):
            return cap
    return DEFAULT_OUTPUT_TOKENS


def _modalities(request: Mapping[str, Any]) -> list[str]:
    config = request.get("generationConfig")
    modalities = config.get("responseModalities") if isinstance(config, dict) else None
    return [str(name).upper() for name in modalities] if isinstance(modalities, list) else []


def _image_tokens(request: Mapping[str, Any]) -> int:
    per_square = IMAGE_OUTPUT_TOKENS.get(str(request.get("quality", "auto")), IMAGE_OUTPUT_TOKENS["auto"])
    size = str(request.get("size", "auto"))
    if "x" in size:
        width, height = (int(side) for side in size.split("x"))
        return per_square * width * height // SQUARE_PIXELS
    return per_square


def units_of(item: Item) -> Units:
    """The expected consumption of one item, from its request alone."""
    request, kind = item.request, item.kind
    units = Units(items=1, input_tokens=-(-_text_chars(request) // CHARS_PER_TOKEN))
    if kind in ("chat", "responses", "messages", "generate_content"):
        units.output_tokens = _output_cap(kind, request)
        units.input_images = _inline_images(
            request.get("messages") or request.get("input") or request.get("contents")
        )
        if units.input_tokens > TIER_THRESHOLD_TOKENS:
            units.over_200k_input_tokens = units.input_tokens
            units.over_200k_output_tokens = units.output_tokens
    elif kind == "image":
        count = int(request.get("n", 1))
        units.images = count
        units.output_image_tokens = count * _image_tokens(request)
    elif kind == "video":
        units.video_seconds = int(request.get("seconds") or V2_DEFAULT_SECONDS)
    elif kind == "video_v1":
        units.video_seconds = int(request.get("seconds") or V1_DEFAULT_SECONDS)
    return units


def group_units(items: Iterable[Item]) -> list[JobEstimate]:
    """Units summed per (job, kind, model), streaming over the items."""
    groups: dict[tuple[str, str, str], JobEstimate] = {}
    for item in items:
        model = str(item.request.get("model") or "")
        group = groups.setdefault((item.job, item.kind, model), JobEstimate(item.job, item.kind, model))
        group.units.add(units_of(item))
    return list(groups.values())


def _price(pricing: Mapping[str, Any], *path: str) -> Decimal | None:
    value: Any = pricing
    for name in path:
        if not isinstance(value, Mapping) or value.get(name) is None:
            return None
        value = value[name]
    return Decimal(str(value))


def price_units(kind: str, units: Units, pricing: Mapping[str, Any] | None) -> Decimal | None:
    """The USD a group's units cost at a pricing object's rates; None when the pricing lacks a rate."""
    if kind == "web_search":
        return WEB_SEARCH_USD_PER_REQUEST * units.items
    if kind == "judgment":
        rate = _price(pricing or {}, "text", "prompt") or JUDGMENT_USD_PER_INPUT_TOKEN
        return rate * units.input_tokens
    if pricing is None:
        return None
    if kind in ("video", "video_v1"):
        per_second = _price(pricing, "generation", "video", "per_second")
        return None if per_second is None else per_second * units.video_seconds
    if kind == "image" and pricing.get("kind") == "generation":
        per_image = _price(pricing, "generation", "image", "per_image")
        return None if per_image is None else per_image * units.images
    prompt, completion = _price(pricing, "text", "prompt"), _price(pricing, "text", "completion")
    input_image = _price(pricing, "multimodal", "input_image") or prompt
    output_image = _price(pricing, "multimodal", "output_image") or completion
    if kind == "image":
        # Image models may publish only a prompt rate and image-token rates (no text completion).
        if output_image is None:
            return None
        return (prompt or Decimal(0)) * units.input_tokens + output_image * units.output_image_tokens
    if prompt is None or completion is None:
        return None
    # The tier lists only the rates that change; the others stay at the base rate.
    tier_prompt = _price(pricing, "tiers", "over_200k", "text", "prompt") or prompt
    tier_completion = _price(pricing, "tiers", "over_200k", "text", "completion") or completion
    return (
        prompt * (units.input_tokens - units.over_200k_input_tokens)
        + tier_prompt * units.over_200k_input_tokens
        + completion * (units.output_tokens - units.over_200k_output_tokens)
        + tier_completion * units.over_200k_output_tokens
        + (input_image or prompt) * units.input_images * INPUT_IMAGE_TOKENS
        + (output_image or completion) * units.output_image_tokens
    )


def needs_pricing(kind: str) -> bool:
    """Web search has a flat price; every other kind asks the pricing route."""
    return kind != "web_search"


async def fetch_pricing(client: Any, model: str) -> dict[str, Any]:
    """The `pricing` object of a model from GET /v1/models/pricing (no charge)."""
    answer = await client.get_pricing(model)
    data = answer.data if hasattr(answer, "data") else answer["data"]
    pricing = data.pricing if hasattr(data, "pricing") else data["pricing"]
    return (
        pricing.model_dump(mode="json", exclude_none=True)
        if hasattr(pricing, "model_dump")
        else dict(pricing)
    )


@dataclass
class PlanEstimate:
    """Estimated cost per (job, kind, model), the total, and why any price is missing."""

    groups: list[JobEstimate]
    notes: list[str] = field(default_factory=list)

    @property
    def total_usd(self) -> Decimal:
        return sum((group.usd or Decimal(0) for group in self.groups), Decimal(0))


async def estimate(items: Iterable[Item], client: Any) -> PlanEstimate:
    """Group the items (streaming), ask the pricing route once per model, and price each group."""
    groups = group_units(items)
    prices: dict[str, dict[str, Any] | None] = {}
    notes: list[str] = []
    for model in sorted({group.model for group in groups if needs_pricing(group.kind) and group.model}):
        try:
            prices[model] = await fetch_pricing(client, model)
        except Exception as error:  # a missing price is reported, never fatal: a plan is a guide
            prices[model] = None
            notes.append(f"{model}: no price ({type(error).__name__}: {error})")
    for group in groups:
        group.usd = price_units(group.kind, group.units, prices.get(group.model))
    return PlanEstimate(groups, notes)
