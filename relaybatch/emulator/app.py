"""The emulator's ASGI app: a local Model Relay Gateway that the runner and the SDKs can talk to."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from relaybatch.emulator.config import AccountConfig, EmulatorConfig, load_config


def error_response(status: int, error_type: str, message: str) -> JSONResponse:
    """The interface's error envelope: ``{error: {type, code, message}}`` with code = status string."""
    body = {"error": {"type": error_type, "code": str(status), "message": message}}
    return JSONResponse(body, status_code=status)


class EmulatorState:
    """What the emulator remembers: accounts by key, and a count of every distinct request body."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.accounts_by_key: dict[str, AccountConfig] = {
            key: account for account in config.accounts for key in account.api_keys
        }
        self.request_counts: Counter[tuple[str, str]] = Counter()

    def record(self, path: str, body: bytes) -> None:
        self.request_counts[(path, hashlib.sha256(body).hexdigest())] += 1

    @property
    def total_requests(self) -> int:
        return sum(self.request_counts.values())


def _bearer_account(state: EmulatorState, request: Request) -> AccountConfig | None:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return state.accounts_by_key.get(key.strip())


def _synthetic_reply(model: str, messages: list[dict[str, Any]]) -> str:
    """A deterministic answer: the same request always gets the same text."""
    last = str(messages[-1].get("content", "")) if messages else ""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8]
    return f"[{model}] reply {digest} to: {last[:60]}"


async def chat_completions(request: Request) -> JSONResponse:
    state: EmulatorState = request.app.state.emulator
    raw = await request.body()
    state.record(request.url.path, raw)
    if _bearer_account(state, request) is None:
        return error_response(401, "authentication_error", "Missing or invalid API key")
    try:
        body = json.loads(raw)
    except ValueError:
        return error_response(400, "invalid_request_error", "Body is not valid JSON")
    model = body.get("model") if isinstance(body, dict) else None
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(model, str) or not isinstance(messages, list):
        return error_response(400, "invalid_request_error", "'model' and 'messages' are required")
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
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def create_app(config: EmulatorConfig | None = None) -> Starlette:
    """Build an emulator app; each app has its own state, so tests never share accounts or logs."""
    app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"])])
    app.state.emulator = EmulatorState(config or load_config())
    return app
