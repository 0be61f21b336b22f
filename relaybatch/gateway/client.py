"""One async client per run for every gateway route, on httpx, with a transport seam."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from relaybatch.gateway.errors import TransportError, status_error
from relaybatch.limiting import Limiter, RequestPurpose, Unlimited


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = None


class ChatChoice(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: int
    message: ChatMessage
    finish_reason: str | None = None


class ChatCompletion(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class GatewayClient:
    """Sends requests to the gateway; every request first takes a token from the limiter."""

    def __init__(
        self,
        base_url: str,
        api_key: SecretStr,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        limiter: Limiter | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        self._api_key = api_key
        self._limiter = limiter or Unlimited()
        self._http = httpx.AsyncClient(
            base_url=base_url,
            transport=transport,
            timeout=timeout or httpx.Timeout(120.0, connect=10.0),
        )

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key.get_secret_value()}"}

    async def _send(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        json: Any = None,
        purpose: RequestPurpose = "submit",
    ) -> Any:
        await self._limiter.acquire(purpose)
        try:
            response = await self._http.request(method, path, headers=headers, json=json)
        except httpx.TransportError as exc:
            # The message names the path only: an exception must never carry the key.
            raise TransportError(f"{method} {path}: {type(exc).__name__}") from None
        rate_limit = None
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code == 429 and isinstance(body, dict):
            rate_limit = (body.get("error") or {}).get("rate_limit")
        self._limiter.observe(response.status_code, response.headers, rate_limit)
        if response.status_code >= 400:
            raise status_error(response.status_code, response.headers, body)
        return body

    async def chat_completions(self, request: dict[str, Any]) -> ChatCompletion:
        body = await self._send("POST", "/v1/chat/completions", headers=self._bearer(), json=request)
        return ChatCompletion.model_validate(body)
