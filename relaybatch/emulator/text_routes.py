"""The text routes (chat completions, responses, messages, generate-content), native and converter."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.errors import error_response


def _synthetic_reply(model: str, messages: list[dict[str, Any]]) -> str:
    last = str(messages[-1].get("content", "")) if messages else ""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8]
    return f"[{model}] reply {digest} to: {last[:60]}"


async def chat_completions(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        return error_response(400, None, "Body is not valid JSON")
    model = body.get("model") if isinstance(body, dict) else None
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(model, str) or not isinstance(messages, list):
        return error_response(400, None, "'model' and 'messages' are required")
    text = _synthetic_reply(model, messages)
    prompt_tokens = max(1, len(json.dumps(messages)) // 4)
    completion_tokens = max(1, len(text) // 4)
    return JSONResponse(
        {
            "id": "chatcmpl-" + hashlib.sha256(raw).hexdigest()[:24],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def routes() -> list[Route]:
    return [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
