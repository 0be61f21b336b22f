"""What a call costs, from the pricing object the pricing route returns (shared conventions).

Token prices are USD per token. Uncached input at ``text.prompt``, cache reads at ``cache.read``,
5-minute writes at ``cache.write``, 1-hour writes at ``cache.write_1h``, visible output at
``text.completion``, reasoning at ``text.internal_reasoning`` when present else ``text.completion``,
image tokens at ``multimodal.input_image`` / ``multimodal.output_image``. When the call's prompt
(uncached + cache reads + cache writes) exceeds 200,000 tokens, every token is billed at
``tiers.over_200k`` (its ``text``, and its ``cache`` when given, else the base cache rates).
Nothing is rounded: the ledger keeps full Decimal precision.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

TIER_THRESHOLD_TOKENS = 200_000
ZERO = Decimal(0)


@dataclass(slots=True)
class TokenCounts:
    """Billable tokens of one call, each counted once (no field includes another)."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    output: int = 0
    reasoning: int = 0
    input_image: int = 0
    output_image: int = 0

    @property
    def prompt_total(self) -> int:
        """The tier rule's prompt size: uncached input + cache reads + cache writes."""
        return self.input + self.cache_read + self.cache_write + self.cache_write_1h

    def as_dict(self) -> dict[str, int]:
        # Spelled out: dataclasses.asdict deep-copies and costs more than the rest of a chat call.
        return {
            "input": self.input,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cache_write_1h": self.cache_write_1h,
            "output": self.output,
            "reasoning": self.reasoning,
            "input_image": self.input_image,
            "output_image": self.output_image,
        }


@lru_cache(maxsize=1024)
def _decimal(text: str) -> Decimal:
    # Prices repeat on every call; parsing each decimal string once keeps billing cheap.
    return Decimal(text)


def _price(table: dict[str, Any] | None, key: str) -> Decimal | None:
    if not table or table.get(key) is None:
        return None
    return _decimal(str(table[key]))


def token_cost(pricing: dict[str, Any], counts: TokenCounts) -> Decimal:
    """USD for a token-priced call; raises KeyError if the pricing has no text prices."""
    text: dict[str, Any] = pricing.get("text") or {}
    cache: dict[str, Any] = pricing.get("cache") or {}
    tier = (pricing.get("tiers") or {}).get("over_200k")
    if tier and counts.prompt_total > TIER_THRESHOLD_TOKENS:
        text = {**text, **(tier.get("text") or {})}
        cache = {**cache, **(tier.get("cache") or {})}
    prompt = _price(text, "prompt") or ZERO
    completion = _price(text, "completion") or ZERO
    reasoning = _price(text, "internal_reasoning")
    multimodal = pricing.get("multimodal")
    return (
        counts.input * prompt
        + counts.cache_read * (_price(cache, "read") or prompt)
        + counts.cache_write * (_price(cache, "write") or prompt)
        + counts.cache_write_1h * (_price(cache, "write_1h") or _price(cache, "write") or prompt)
        + counts.output * completion
        + counts.reasoning * (reasoning if reasoning is not None else completion)
        + counts.input_image * (_price(multimodal, "input_image") or prompt)
        + counts.output_image * (_price(multimodal, "output_image") or completion)
    )


def generation_cost(
    pricing: dict[str, Any],
    *,
    images: int = 0,
    video_seconds: Decimal | int = 0,
    with_audio: bool = False,
    audio_seconds: Decimal | int = 0,
) -> Decimal:
    """USD for a generation-priced call: per image, per video second (with or without audio),
    per audio second."""
    generation: dict[str, Any] = pricing.get("generation") or {}
    total = ZERO
    if images:
        total += images * (_price(generation.get("image"), "per_image") or ZERO)
    if video_seconds:
        video = generation.get("video")
        rate = _price(video, "per_second_with_audio") if with_audio else None
        total += Decimal(video_seconds) * (rate or _price(video, "per_second") or ZERO)
    if audio_seconds:
        total += Decimal(audio_seconds) * (_price(generation.get("audio"), "per_second") or ZERO)
    return total
