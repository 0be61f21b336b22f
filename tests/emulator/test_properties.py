"""Properties of the text routes over generated requests: determinism, usage arithmetic, billing."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import httpx
from emulator_http import bearer, user_chat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaybatch.emulator import EmulatorConfig, create_app

CHAT_MODELS = ["relay-chat-small", "relay-chat-reasoner", "relay-claude-sonnet", "relay-gemini-pro"]
texts = st.text(min_size=1, max_size=6000)


async def call_twice(config: EmulatorConfig, request: dict[str, Any]) -> tuple[list[Any], Decimal, Decimal]:
    app = create_app(config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as client:
        first = (await client.post("/openai/v1/chat/completions", json=request, headers=bearer())).json()
        second = (await client.post("/openai/v1/chat/completions", json=request, headers=bearer())).json()
    state = app.state.emulator
    charged = sum((charge.usd for charge in state.ledger), Decimal(0))
    return [first, second], charged, Decimal("100.00") - state.accounts["demo"].balance


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts, model=st.sampled_from(CHAT_MODELS), limit=st.none() | st.integers(1, 64))
def test_same_request_same_answer_and_the_ledger_matches_the_balance(
    shipped_config: EmulatorConfig, text: str, model: str, limit: int | None
) -> None:
    request = user_chat(model, text, **({"max_tokens": limit} if limit else {}))

    (first, second), charged, spent = asyncio.run(call_twice(shipped_config, request))

    assert first["choices"] == second["choices"]
    assert first["usage"] == second["usage"]
    usage = first["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] <= usage["completion_tokens"]
    if limit is not None:
        visible = usage["completion_tokens"] - usage["completion_tokens_details"]["reasoning_tokens"]
        assert visible <= limit
    assert charged == spent > 0
