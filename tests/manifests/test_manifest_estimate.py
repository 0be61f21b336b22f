"""Plan estimates: units from requests, Decimal prices from the pricing object, one lookup per model."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from relaybatch.manifests import Item
from relaybatch.manifests.estimate import Units, estimate, price_units, units_of

TOKEN_PRICES = {"kind": "token", "text": {"prompt": "0.000001", "completion": "0.000004"}}


def _item(kind: Any, request: dict[str, Any], job: str = "j") -> Item:
    return Item.build(item_id="1", job=job, kind=kind, request=request)


def test_chat_units_come_from_text_length_and_max_tokens() -> None:
    units = units_of(
        _item("chat", {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "x" * 40}]})
    )
    assert (units.input_tokens, units.output_tokens) == (10, 50)
    assert price_units("chat", units, TOKEN_PRICES) == Decimal("0.00021")


def test_images_are_priced_per_image_or_by_output_tokens() -> None:
    units = units_of(
        _item("image", {"model": "m", "prompt": "kite", "n": 3, "quality": "low", "size": "1024x1024"})
    )
    assert units.images == 3 and units.output_image_tokens == 3 * 272
    per_image = {"kind": "generation", "generation": {"image": {"per_image": "0.04"}}}
    assert price_units("image", units, per_image) == Decimal("0.12")
    tokens = {**TOKEN_PRICES, "multimodal": {"output_image": "0.00004"}}
    assert price_units("image", units, tokens) == Decimal("0.000001") * 1 + Decimal("0.00004") * 816


def test_video_is_priced_by_seconds_with_each_routes_default() -> None:
    rates = {"kind": "generation", "generation": {"video": {"per_second": "0.10"}}}
    v2 = units_of(_item("video", {"model": "m", "prompt": "sea", "seconds": "8"}))
    v1 = units_of(_item("video_v1", {"model": "m", "prompt": "sea"}))
    assert price_units("video", v2, rates) == Decimal("0.80")
    assert price_units("video_v1", v1, rates) == Decimal("0.50")


def test_judgment_and_web_search_have_published_prices() -> None:
    judged = Units(items=1, input_tokens=1_000_000)
    assert price_units("judgment", judged, None) == Decimal("0.042")
    assert price_units("web_search", Units(items=4), None) == Decimal("0.20")


def test_a_missing_price_is_unknown_not_zero() -> None:
    assert price_units("chat", Units(items=1, input_tokens=5), None) is None
    assert price_units("video", Units(items=1, video_seconds=4), TOKEN_PRICES) is None


class PricingClient:
    """Answers the pricing route from a table and records each lookup."""

    def __init__(self, prices: dict[str, dict[str, Any]]) -> None:
        self.prices = prices
        self.asked: list[str] = []

    async def get_pricing(self, model: str) -> dict[str, Any]:
        self.asked.append(model)
        if model not in self.prices:
            raise LookupError(f"no pricing for {model}")
        return {"object": "pricing", "data": {"id": model, "pricing": self.prices[model]}}


async def test_estimate_asks_once_per_model_and_notes_missing_prices() -> None:
    chat = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "abcd"}]}
    items = [
        _item("chat", chat),
        _item("chat", {**chat, "max_tokens": 20}),
        _item("chat", {**chat, "model": "gone"}, job="k"),
    ]
    client = PricingClient({"m": TOKEN_PRICES})

    plan = await estimate(items, client)

    assert client.asked == ["gone", "m"]
    first, second = plan.groups
    assert (first.job, first.units.items, first.usd) == (
        "j",
        2,
        Decimal("0.000001") * 2 + Decimal("0.000004") * 30,
    )
    assert second.usd is None and plan.notes == ["gone: no price (LookupError: no pricing for gone)"]
    assert plan.total_usd == first.usd


def test_a_prompt_over_200k_tokens_is_priced_at_the_tier() -> None:
    from relaybatch.costs import TIER_THRESHOLD_TOKENS
    from relaybatch.manifests.estimate import TIER_THRESHOLD_TOKENS as ESTIMATE_THRESHOLD

    assert ESTIMATE_THRESHOLD == TIER_THRESHOLD_TOKENS
    tiered = {
        **TOKEN_PRICES,
        "tiers": {"over_200k": {"text": {"prompt": "0.000002"}}},  # completion unchanged: base rate
    }
    long = _item(
        "chat", {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 800_004}]}
    )
    short = _item(
        "chat", {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 800_000}]}
    )
    over, at = units_of(long), units_of(short)
    assert (over.input_tokens, over.over_200k_input_tokens, over.over_200k_output_tokens) == (
        200_001,
        200_001,
        10,
    )
    assert (at.input_tokens, at.over_200k_input_tokens) == (200_000, 0)
    assert price_units("chat", over, tiered) == Decimal("0.000002") * 200_001 + Decimal("0.000004") * 10
    assert price_units("chat", at, tiered) == Decimal("0.000001") * 200_000 + Decimal("0.000004") * 10
    # Summed with a short call, each keeps its own rate; without a tier the base rate applies.
    both = Units()
    both.add(over)
    both.add(at)
    assert price_units("chat", both, tiered) == price_units("chat", over, tiered) + price_units(
        "chat", at, tiered
    )
    assert price_units("chat", over, TOKEN_PRICES) == Decimal("0.000001") * 200_001 + Decimal("0.000004") * 10
