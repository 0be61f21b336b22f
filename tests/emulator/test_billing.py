"""Billing: every charge is computed from the pricing route's prices and the usage the caller saw;
402 comes before any processing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest
from emulator_http import anthropic, bearer, goog, user_chat, user_contents, user_messages

from relaybatch.emulator import EmulatorState

LONG = "lorem ipsum " * 1000  # ~3,000 tokens: past the 1,024-token cache threshold
OVER_200K = "x" * 820_000  # ~205,000 tokens


async def pricing_of(http: httpx.AsyncClient, model: str) -> dict[str, Any]:
    response = await http.get("/v1/models/pricing", params={"model": model}, headers=bearer())
    pricing: dict[str, Any] = response.json()["data"]["pricing"]
    return pricing


async def last_charge(http: httpx.AsyncClient) -> Decimal:
    return Decimal((await http.get("/_emulator/ledger")).json()["charges"][-1]["usd"])


def d(value: str) -> Decimal:
    return Decimal(value)


async def test_plain_chat_costs_prompt_and_completion(http: httpx.AsyncClient) -> None:
    price = (await pricing_of(http, "relay-chat-small"))["text"]

    usage = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()["usage"]

    expected = usage["prompt_tokens"] * d(price["prompt"]) + usage["completion_tokens"] * d(
        price["completion"]
    )
    assert await last_charge(http) == expected


async def test_reasoning_tokens_bill_at_the_internal_reasoning_rate(http: httpx.AsyncClient) -> None:
    price = (await pricing_of(http, "relay-chat-reasoner"))["text"]

    usage = (
        await http.post("/v1/chat/completions", json=user_chat("relay-chat-reasoner"), headers=bearer())
    ).json()["usage"]

    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    assert reasoning > 0
    expected = (
        usage["prompt_tokens"] * d(price["prompt"])
        + (usage["completion_tokens"] - reasoning) * d(price["completion"])
        + reasoning * d(price["internal_reasoning"])
    )
    assert await last_charge(http) == expected


async def test_openai_cache_reads_bill_at_the_cache_rate(http: httpx.AsyncClient) -> None:
    price = await pricing_of(http, "relay-chat-small")

    usage = (await http.post("/v1/chat/completions", json=user_chat(text=LONG), headers=bearer())).json()[
        "usage"
    ]

    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached == usage["prompt_tokens"] // 2
    expected = (
        (usage["prompt_tokens"] - cached) * d(price["text"]["prompt"])
        + cached * d(price["cache"]["read"])
        + usage["completion_tokens"] * d(price["text"]["completion"])
    )
    assert await last_charge(http) == expected


async def test_short_prompts_read_nothing_from_the_cache(http: httpx.AsyncClient) -> None:
    usage = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()["usage"]

    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def messages_cost(usage: dict[str, Any], price: dict[str, Any]) -> Decimal:
    one_hour = usage["cache_creation"]["ephemeral_1h_input_tokens"]
    five_minutes = usage["cache_creation"]["ephemeral_5m_input_tokens"]
    assert usage["cache_creation_input_tokens"] == one_hour + five_minutes
    return (
        usage["input_tokens"] * d(price["text"]["prompt"])
        + usage["cache_read_input_tokens"] * d(price["cache"]["read"])
        + five_minutes * d(price["cache"]["write"])
        + one_hour * d(price["cache"]["write_1h"])
        + usage["output_tokens"] * d(price["text"]["completion"])
    )


async def test_messages_cache_reads_and_writes(http: httpx.AsyncClient) -> None:
    price = await pricing_of(http, "relay-claude-sonnet")

    response = await http.post(
        "/v1/messages", json=user_messages("relay-claude-sonnet", LONG), headers=anthropic()
    )

    usage = response.json()["usage"]
    assert usage["cache_read_input_tokens"] > 0
    assert usage["cache_creation"]["ephemeral_5m_input_tokens"] > 0
    assert usage["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    assert await last_charge(http) == messages_cost(usage, price)


async def test_prompt_past_200k_bills_every_token_at_the_tier(http: httpx.AsyncClient) -> None:
    price = await pricing_of(http, "relay-claude-sonnet")
    tier = {"text": price["tiers"]["over_200k"]["text"], "cache": price["tiers"]["over_200k"]["cache"]}

    response = await http.post(
        "/v1/messages", json=user_messages("relay-claude-sonnet", OVER_200K), headers=anthropic()
    )

    usage = response.json()["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    assert prompt > 200_000
    assert await last_charge(http) == messages_cost(usage, tier)


async def test_tier_without_cache_prices_keeps_the_base_cache_rate(http: httpx.AsyncClient) -> None:
    price = await pricing_of(http, "relay-gemini-pro")
    tier = price["tiers"]["over_200k"]["text"]

    response = await http.post(
        "/v1beta/models/relay-gemini-pro:generateContent", json=user_contents(OVER_200K), headers=goog()
    )

    usage = response.json()["usageMetadata"]
    cached, thoughts = usage["cachedContentTokenCount"], usage["thoughtsTokenCount"]
    expected = (
        (usage["promptTokenCount"] - cached) * d(tier["prompt"])
        + cached * d(price["cache"]["read"])
        + usage["candidatesTokenCount"] * d(tier["completion"])
        + thoughts * d(tier["internal_reasoning"])
    )
    assert await last_charge(http) == expected


async def test_converter_bills_what_the_callers_format_shows(http: httpx.AsyncClient) -> None:
    """Chat completions cannot show cache writes: the converter reports and bills them as input."""
    price = await pricing_of(http, "relay-claude-sonnet")

    response = await http.post(
        "/openai/v1/chat/completions", json=user_chat("relay-claude-sonnet", LONG), headers=bearer()
    )

    usage = response.json()["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    expected = (
        (usage["prompt_tokens"] - cached) * d(price["text"]["prompt"])
        + cached * d(price["cache"]["read"])
        + usage["completion_tokens"] * d(price["text"]["completion"])
    )
    assert await last_charge(http) == expected


async def test_ledger_entry_names_account_route_model_usage_and_body(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())

    [charge] = (await http.get("/_emulator/ledger")).json()["charges"]
    assert charge["account"] == "demo"
    assert charge["route"] == "/v1/chat/completions"
    assert charge["model"] == "relay-chat-small"
    assert charge["usage"]["format"] == "chat_completions"
    assert charge["body_hash"] == next(iter(state.requests.counts))[2]
    assert charge["time"] == "2027-01-15T08:00:00Z"
    assert state.accounts["demo"].balance == Decimal("100.00") - Decimal(charge["usd"])


# ---- 402 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/chat/completions", user_chat(), bearer("rb-empty-key")),
        ("/v1/messages", user_messages(), anthropic("rb-empty-key")),
        ("/v1/responses", {"model": "relay-chat-small", "input": "hi"}, bearer("rb-empty-key")),
    ],
)
async def test_no_balance_is_402_and_nothing_is_charged(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    response = await http.post(path, json=body, headers=headers)

    assert response.status_code == 402
    assert response.json()["error"]["type"] == "insufficient_balance"
    assert (await http.get("/_emulator/ledger")).json()["charges"] == []


async def test_generate_content_402_uses_its_own_shape(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent",
        json=user_contents(),
        headers=goog("rb-empty-key"),
    )

    assert response.status_code == 402
    assert response.json()["error"]["code"] == 402


async def test_low_balance_runs_until_it_cannot_pay_then_top_up(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    statuses = []
    for index in range(20):
        request = user_chat(text=f"question {index}")
        statuses.append(
            (await http.post("/v1/chat/completions", json=request, headers=bearer("rb-low-key"))).status_code
        )

    assert statuses[0] == 200
    assert 402 in statuses
    paid = sum(
        Decimal(c["usd"]) for c in (await http.get("/_emulator/ledger?account=lowbalance")).json()["charges"]
    )
    assert paid == Decimal("0.0001") - state.accounts["lowbalance"].balance
    assert state.accounts["lowbalance"].balance >= 0

    await http.post("/_emulator/accounts/lowbalance/balance", json={"usd": "1.00"})
    response = await http.post(
        "/v1/chat/completions", json=user_chat(text="again"), headers=bearer("rb-low-key")
    )
    assert response.status_code == 200
