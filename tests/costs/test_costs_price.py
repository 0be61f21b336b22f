"""Every pricing path against values worked out by hand (prices in USD per token)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from relaybatch.cost_model import price_call
from relaybatch.cost_model.pricing import PricingError, judgment_prices, parse_pricing, web_search_prices
from relaybatch.cost_model.usage import UsageCounts, video_usage

D = Decimal

TOKEN_PRICING = {
    "object": "pricing",
    "data": {
        "id": "chat-model",
        "display_name": "Chat Model",
        "type_target": "openai",
        "provider": "alpha",
        "pricing": {
            "kind": "token",
            "text": {"prompt": "0.000003", "completion": "0.000015", "internal_reasoning": "0.00002"},
            "cache": {"read": "0.0000003", "write": "0.00000375", "write_1h": "0.000006"},
            "multimodal": {"input_image": "0.00001", "output_image": "0.00004"},
            "tiers": {
                "over_200k": {
                    "text": {"prompt": "0.000006", "completion": "0.0000225"},
                    "cache": {"read": "0.0000006", "write": "0.0000075", "write_1h": "0.000012"},
                }
            },
        },
    },
}


def token_prices(**changes: object) -> object:
    pricing = {**TOKEN_PRICING["data"]["pricing"], **changes}  # type: ignore[index]
    return parse_pricing({"data": {**TOKEN_PRICING["data"], "pricing": pricing}})  # type: ignore[dict-item]


def test_input_and_output_tokens() -> None:
    cost = price_call(parse_pricing(TOKEN_PRICING), UsageCounts(input_tokens=1000, output_tokens=200))
    # 1000 x 0.000003 = 0.003; 200 x 0.000015 = 0.003
    assert cost.usd == D("0.006")
    assert cost.tier == "base"
    assert cost.component("input").unit_price == D("0.000003")  # type: ignore[union-attr]


def test_reasoning_uses_internal_reasoning_price_when_present() -> None:
    cost = price_call(parse_pricing(TOKEN_PRICING), UsageCounts(output_tokens=100, reasoning_tokens=50))
    # 100 x 0.000015 = 0.0015; 50 x 0.00002 = 0.001
    assert cost.usd == D("0.0025")
    assert cost.component("reasoning").price_path == "text.internal_reasoning"  # type: ignore[union-attr]


def test_reasoning_falls_back_to_completion_price() -> None:
    prices = token_prices(text={"prompt": "0.000003", "completion": "0.000015"})
    cost = price_call(prices, UsageCounts(output_tokens=100, reasoning_tokens=50))  # type: ignore[arg-type]
    # 150 x 0.000015 = 0.00225
    assert cost.usd == D("0.00225")
    assert cost.component("reasoning").price_path == "text.completion"  # type: ignore[union-attr]


def test_cache_read_and_both_cache_writes() -> None:
    usage = UsageCounts(
        input_tokens=100, cache_read_tokens=2000, cache_write_5m_tokens=400, cache_write_1h_tokens=300
    )
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # 100 x 0.000003 = 0.0003; 2000 x 0.0000003 = 0.0006; 400 x 0.00000375 = 0.0015;
    # 300 x 0.000006 = 0.0018  -> 0.0042
    assert cost.usd == D("0.0042")


def test_image_tokens_in_and_out() -> None:
    usage = UsageCounts(input_tokens=50, input_image_tokens=500, output_image_tokens=4000)
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # 50 x 0.000003 = 0.00015; 500 x 0.00001 = 0.005; 4000 x 0.00004 = 0.16
    assert cost.usd == D("0.16515")


def test_prompt_of_exactly_200k_tokens_stays_on_base_rates() -> None:
    usage = UsageCounts(
        input_tokens=150_000, cache_read_tokens=40_000, cache_write_5m_tokens=10_000, output_tokens=10
    )
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # 150000 x 0.000003 = 0.45; 40000 x 0.0000003 = 0.012; 10000 x 0.00000375 = 0.0375; 10 x 0.000015
    assert cost.tier == "base"
    assert cost.usd == D("0.49965")


def test_one_token_over_200k_bills_every_token_at_tier_rates() -> None:
    usage = UsageCounts(
        input_tokens=150_001,
        cache_read_tokens=40_000,
        cache_write_5m_tokens=9_000,
        cache_write_1h_tokens=1_000,
        output_tokens=10,
    )
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # 150001 x 0.000006 = 0.900006; 40000 x 0.0000006 = 0.024; 9000 x 0.0000075 = 0.0675;
    # 1000 x 0.000012 = 0.012; 10 x 0.0000225 = 0.000225
    assert cost.tier == "over_200k"
    assert cost.usd == D("1.003731")
    assert cost.component("input").price_path == "tiers.over_200k.text.prompt"  # type: ignore[union-attr]


def test_tier_reasoning_keeps_base_internal_reasoning_when_the_tier_has_none() -> None:
    usage = UsageCounts(input_tokens=200_001, reasoning_tokens=20)
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # 200001 x 0.000006 = 1.200006; 20 x 0.00002 (base internal_reasoning) = 0.0004
    assert cost.usd == D("1.200406")
    assert cost.component("reasoning").price_path == "text.internal_reasoning"  # type: ignore[union-attr]


def test_tier_reasoning_uses_the_tier_reasoning_price_when_given() -> None:
    tiers = {
        "over_200k": {
            "text": {"prompt": "0.000006", "completion": "0.0000225", "internal_reasoning": "0.00003"}
        }
    }
    cost = price_call(token_prices(tiers=tiers), UsageCounts(input_tokens=200_001, reasoning_tokens=20))  # type: ignore[arg-type]
    # 1.200006 + 20 x 0.00003 = 0.0006
    assert cost.usd == D("1.200606")


def test_tier_reasoning_without_any_reasoning_price_is_billed_at_tier_output() -> None:
    prices = token_prices(
        text={"prompt": "0.000003", "completion": "0.000015"},
        tiers={"over_200k": {"text": {"prompt": "0.000006", "completion": "0.0000225"}}},
    )
    cost = price_call(prices, UsageCounts(input_tokens=200_001, reasoning_tokens=20))  # type: ignore[arg-type]
    # 1.200006 + 20 x 0.0000225 = 0.00045
    assert cost.usd == D("1.200456")
    assert cost.component("reasoning").price_path == "tiers.over_200k.text.completion"  # type: ignore[union-attr]


def test_tier_without_cache_prices_keeps_base_cache_prices() -> None:
    prices = token_prices(tiers={"over_200k": {"text": {"prompt": "0.000006", "completion": "0.0000225"}}})
    usage = UsageCounts(input_tokens=200_000, cache_read_tokens=1, output_tokens=1)
    cost = price_call(prices, usage)  # type: ignore[arg-type]
    # 200000 x 0.000006 = 1.2; 1 x 0.0000003 (base read) ; 1 x 0.0000225
    assert cost.tier == "over_200k"
    assert cost.usd == D("1.2000228")
    assert cost.component("cache_read").price_path == "cache.read"  # type: ignore[union-attr]


def test_image_tokens_do_not_count_toward_the_tier() -> None:
    usage = UsageCounts(input_tokens=199_999, cache_read_tokens=1, input_image_tokens=5000)
    cost = price_call(parse_pricing(TOKEN_PRICING), usage)
    # base: 199999 x 0.000003 = 0.599997; 1 x 0.0000003; 5000 x 0.00001 = 0.05
    assert cost.tier == "base"
    assert cost.usd == D("0.6499973")


GENERATION_PRICING = {
    "data": {
        "id": "media-model",
        "pricing": {
            "kind": "generation",
            "generation": {
                "image": {"per_image": "0.04"},
                "audio": {"per_second": "0.0025"},
                "video": {"per_second": "0.10", "per_second_with_audio": "0.15"},
            },
        },
    }
}


def test_per_image() -> None:
    # Token usage on a per-image model is not billed: only the images are.
    usage = UsageCounts(images=3, output_image_tokens=999)
    assert price_call(parse_pricing(GENERATION_PRICING), usage).usd == D("0.12")


def test_per_audio_second() -> None:
    usage = UsageCounts(audio_seconds=D("12.5"))
    assert price_call(parse_pricing(GENERATION_PRICING), usage).usd == D("0.03125")


def test_per_video_second_without_and_with_audio() -> None:
    prices = parse_pricing(GENERATION_PRICING)
    assert price_call(prices, video_usage(D(5), with_audio=False)).usd == D("0.50")
    assert price_call(prices, video_usage(D(8), with_audio=True)).usd == D("1.20")


def test_video_quote_is_the_charge_even_if_prices_changed() -> None:
    prices = parse_pricing(GENERATION_PRICING)
    cost = price_call(prices, video_usage(D(8), with_audio=False, quote_usd=D("0.64")))
    assert cost.usd == D("0.64")
    assert [part.name for part in cost.components] == ["video_quote"]


def test_typed_judgment_charges_input_only() -> None:
    cost = price_call(judgment_prices("judge"), UsageCounts(input_tokens=1_000_000, output_tokens=5000))
    assert cost.usd == D("0.042")
    assert price_call(judgment_prices("judge"), UsageCounts(input_tokens=1234)).usd == D("0.000051828")


def test_web_search_per_successful_request() -> None:
    assert price_call(web_search_prices("search"), UsageCounts(requests=1)).usd == D("0.05")
    assert price_call(web_search_prices("search"), UsageCounts(requests=0)).usd == D(0)


def test_unknown_price_is_marked_unknown_not_zero() -> None:
    prices = token_prices(text={"prompt": "0.000003"})
    cost = price_call(prices, UsageCounts(input_tokens=10, output_tokens=5))  # type: ignore[arg-type]
    assert cost.usd is None
    assert cost.unknown == ("text.completion",)
    assert cost.known_usd == D("0.00003")


def test_unknown_price_of_an_unused_component_does_not_matter() -> None:
    prices = token_prices(text={"prompt": "0.000003"})
    assert price_call(prices, UsageCounts(input_tokens=10)).usd == D("0.00003")  # type: ignore[arg-type]


def test_no_prices_at_all_marks_every_used_component_unknown() -> None:
    cost = price_call(None, UsageCounts(input_tokens=10, images=1))
    assert cost.usd is None
    assert set(cost.unknown) == {"text.prompt", "generation.image.per_image"}


def test_money_stays_decimal_with_full_precision() -> None:
    cost = price_call(judgment_prices("judge"), UsageCounts(input_tokens=1))
    assert isinstance(cost.usd, Decimal)
    assert cost.usd == D("0.000000042")


@pytest.mark.parametrize("bad", ["abc", "-1", "NaN", True, {"x": 1}])
def test_bad_price_value_names_its_path(bad: object) -> None:
    with pytest.raises(PricingError, match=r"text\.prompt"):
        token_prices(text={"prompt": bad, "completion": "0.1"})
