"""From one engine call (kind, request, result) to what the costs package needs: model and usage.

The engine's results keep each family's own usage object whole under ``usage`` (docs/engine.md);
this module picks the right reader for the kind. Video usage comes from the request and the
create answer, because the gateway bills video at creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaybatch.cost_model.pricing import ModelPrices, PriceBook, judgment_prices, web_search_prices
from relaybatch.cost_model.usage import (
    USAGE_READERS,
    UsageCounts,
    UsageError,
    images_usage,
    seconds_value,
    video_usage,
    web_search_usage,
)
from relaybatch.cost_model.worst_case import V1_DEFAULT_SECONDS, V2_DEFAULT_SECONDS
from relaybatch.kinds import VIDEO_KINDS, VIDEO_V1, WEB_SEARCH

WEB_SEARCH_MODEL = "web_search"
# Request flags that ask for a soundtrack (the interface does not name one; these are the common ones).
AUDIO_FLAGS = ("audio", "with_audio", "generate_audio")


def call_model(kind: str, request: Mapping[str, Any]) -> str:
    if kind == WEB_SEARCH:
        return str(request.get("route") or "search")
    return str(request.get("model") or "")


def prices_for(
    kind: str, request: Mapping[str, Any], book: PriceBook, provider: str | None
) -> ModelPrices | None:
    model = call_model(kind, request)
    if kind == "judgment":
        return judgment_prices(model)
    if kind == WEB_SEARCH:
        return web_search_prices(model)
    return book.get(model, provider)


def _usage(result: Mapping[str, Any]) -> Mapping[str, Any]:
    usage = result.get("usage")
    return usage if isinstance(usage, Mapping) else {}


def _remote(result: Mapping[str, Any]) -> Mapping[str, Any]:
    remote = result.get("remote")
    return remote if isinstance(remote, Mapping) else {}


def _with_audio(request: Mapping[str, Any]) -> bool:
    return any(request.get(flag) is True for flag in AUDIO_FLAGS)


def _image_count(request: Mapping[str, Any]) -> int:
    n = request.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _video(kind: str, request: Mapping[str, Any], result: Mapping[str, Any]) -> UsageCounts:
    remote = _remote(result)
    default = V1_DEFAULT_SECONDS if kind == VIDEO_V1 else V2_DEFAULT_SECONDS
    seconds = seconds_value(remote.get("seconds"), None) or seconds_value(request.get("seconds"), default)
    quote = seconds_value(remote.get("quote_usd"), None) if kind == "video" else None
    return video_usage(seconds or default, with_audio=_with_audio(request), quote_usd=quote)


def usage_for_call(kind: str, request: Mapping[str, Any], result: Mapping[str, Any]) -> UsageCounts:
    """The billable counts of a finished (or submitted) call, from its result."""
    usage = _usage(result)
    reader = USAGE_READERS.get(kind)
    if reader is not None:
        if not usage:
            # Pricing an absent usage object would be a silent zero: the row is marked unknown instead.
            raise UsageError("the answer carries no usage")
        return reader(usage)
    if kind == "image":
        # The gateway bills the images asked for (per-image models), whatever arrived intact.
        return images_usage(usage, images=_image_count(request))
    if kind in VIDEO_KINDS:
        return _video(kind, request, result)
    if kind == WEB_SEARCH:
        return web_search_usage(succeeded=True)
    raise ValueError(f"no usage reader for kind {kind!r}")
