"""The cost of one call: its usage times the unit prices that apply, component by component.

Tier rule (the gateway's `tiers.over_200k`): when a call's prompt, counted as uncached input +
cache reads + cache writes (5-minute and 1-hour), is MORE than 200,000 tokens, every token of that
call is billed at the tier's rates: its `text` prices for input, output and reasoning, and its
`cache` prices when the tier gives them. A price the tier leaves out keeps its base value (the tier
lists what changes). Image tokens neither count toward the 200,000 nor change price (the tier has
no `multimodal`). A prompt of exactly 200,000 tokens is billed at base rates.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from relaybatch.cost_model.pricing import CacheRates, ModelPrices, TextRates
from relaybatch.cost_model.usage import UsageCounts

TIER_THRESHOLD_TOKENS = 200_000

# Names of the components, in ledger column order.
COMPONENTS = (
    "input",
    "output",
    "reasoning",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "input_image",
    "output_image",
    "images",
    "audio_seconds",
    "video_seconds",
    "video_seconds_with_audio",
    "requests",
    "video_quote",
)


@dataclass(frozen=True)
class CostComponent:
    """One priced quantity: ``usd`` is None when the unit price is unknown."""

    name: str
    quantity: Decimal
    unit_price: Decimal | None
    price_path: str  # where in the pricing object the unit price came from

    @property
    def usd(self) -> Decimal | None:
        return None if self.unit_price is None else self.quantity * self.unit_price


@dataclass(frozen=True)
class CallCost:
    components: tuple[CostComponent, ...]
    tier: str  # "base" or "over_200k"
    # Why the cost cannot be known beyond missing prices (e.g. the outcome of the call is unknown).
    unknowable: tuple[str, ...] = ()

    @property
    def unknown(self) -> tuple[str, ...]:
        """Price paths the call needed and the pricing object did not give, and other unknowns."""
        missing = tuple(part.price_path for part in self.components if part.unit_price is None)
        return missing + self.unknowable

    @property
    def usd(self) -> Decimal | None:
        """Total in full precision, or None when any needed price is unknown (never a silent 0)."""
        if self.unknown:
            return None
        return sum((part.usd for part in self.components if part.usd is not None), Decimal(0))

    @property
    def known_usd(self) -> Decimal:
        """The part of the cost whose prices are known: a lower bound when ``usd`` is None."""
        return sum((part.usd for part in self.components if part.usd is not None), Decimal(0))

    def component(self, name: str) -> CostComponent | None:
        return next((part for part in self.components if part.name == name), None)


def _over(
    base: Decimal | None, tier: Decimal | None, base_path: str, tier_path: str
) -> tuple[Decimal | None, str]:
    """A tier price where the tier gives one, else the base price (the tier lists only what changes)."""
    return (tier, tier_path) if tier is not None else (base, base_path)


def _token_rates(
    prices: ModelPrices, usage: UsageCounts
) -> tuple[str, dict[str, tuple[Decimal | None, str]]]:
    """Unit price and its path for each token component, after the over-200k tier rule."""
    text, cache = prices.text, prices.cache
    over = prices.over_200k_text is not None and usage.prompt_tokens > TIER_THRESHOLD_TOKENS
    tier_text = prices.over_200k_text if over else None
    tier_cache = prices.over_200k_cache if over else None
    t, c = tier_text or TextRates(), tier_cache or CacheRates()
    tp, cp = "tiers.over_200k.text", "tiers.over_200k.cache"
    rates = {
        "input": _over(text.prompt, t.prompt, "text.prompt", f"{tp}.prompt"),
        "output": _over(text.completion, t.completion, "text.completion", f"{tp}.completion"),
        "internal_reasoning": _over(
            text.internal_reasoning,
            t.internal_reasoning,
            "text.internal_reasoning",
            f"{tp}.internal_reasoning",
        ),
        "cache_read": _over(cache.read, c.read, "cache.read", f"{cp}.read"),
        "cache_write_5m": _over(cache.write, c.write, "cache.write", f"{cp}.write"),
        "cache_write_1h": _over(cache.write_1h, c.write_1h, "cache.write_1h", f"{cp}.write_1h"),
    }
    # Reasoning has its own price when there is one, else it is billed as output.
    reasoning = rates.pop("internal_reasoning")
    rates["reasoning"] = reasoning if reasoning[0] is not None else rates["output"]
    return ("over_200k" if over else "base"), rates


def _token_components(prices: ModelPrices, usage: UsageCounts) -> tuple[str, list[CostComponent]]:
    tier, rates = _token_rates(prices, usage)
    counts = {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "reasoning": usage.reasoning_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write_5m": usage.cache_write_5m_tokens,
        "cache_write_1h": usage.cache_write_1h_tokens,
    }
    parts = [CostComponent(name, Decimal(count), *rates[name]) for name, count in counts.items()]
    parts += [
        CostComponent(
            "input_image", Decimal(usage.input_image_tokens), prices.input_image, "multimodal.input_image"
        ),
        CostComponent(
            "output_image", Decimal(usage.output_image_tokens), prices.output_image, "multimodal.output_image"
        ),
    ]
    return tier, parts


def _generation_components(prices: ModelPrices, usage: UsageCounts) -> list[CostComponent]:
    video = "generation.video"
    return [
        CostComponent("images", Decimal(usage.images), prices.per_image, "generation.image.per_image"),
        CostComponent(
            "audio_seconds", usage.audio_seconds, prices.audio_per_second, "generation.audio.per_second"
        ),
        CostComponent("video_seconds", usage.video_seconds, prices.video_per_second, f"{video}.per_second"),
        CostComponent(
            "video_seconds_with_audio",
            usage.video_seconds_with_audio,
            prices.video_per_second_with_audio,
            f"{video}.per_second_with_audio",
        ),
    ]


def price_call(prices: ModelPrices | None, usage: UsageCounts) -> CallCost:
    """The cost of one call. With no prices at all, every needed component is unknown.

    A video quote fixed at creation is the whole charge: it is not recomputed from today's
    per-second price, which may have changed since.
    """
    if usage.quote_usd is not None:
        quote = CostComponent("video_quote", Decimal(1), usage.quote_usd, "quote_usd")
        return CallCost((quote,), "base")
    known = prices or ModelPrices(model="?")
    tier = "base"
    parts: list[CostComponent] = []
    if prices is None or prices.kind in ("token", "fixed"):
        tier, token_parts = _token_components(known, usage)
        parts += token_parts
    if prices is None or prices.kind in ("generation", "fixed"):
        parts += _generation_components(known, usage)
    parts.append(CostComponent("requests", Decimal(usage.requests), known.per_request, "per_request"))
    return CallCost(tuple(part for part in parts if part.quantity), tier)
