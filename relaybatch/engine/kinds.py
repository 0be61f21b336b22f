"""Per-kind calls: how an item's request becomes a gateway call and a result to store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from relaybatch.gateway import GatewayClient

CallKind = Callable[[GatewayClient, dict[str, Any]], Awaitable[dict[str, Any]]]


async def call_chat(client: GatewayClient, request: dict[str, Any]) -> dict[str, Any]:
    completion = await client.chat_completions(request)
    choice = completion.choices[0]
    return {
        "output_text": choice.message.content,
        "finish_reason": choice.finish_reason,
        "usage": completion.usage.model_dump() if completion.usage else None,
        "model": completion.model,
    }


CALLS: dict[str, CallKind] = {"chat": call_chat}
