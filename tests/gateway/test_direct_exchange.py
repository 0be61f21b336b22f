"""Plain JSON calls on the aiohttp transport skip httpx's models (exchange.py): what reaches the
gateway must be what the httpx path sends, byte for byte where it matters, and the answer's
headers must reach the limiter and the error mapping the same way."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from gateway_support import CHAT_ANSWER, RecordingLimiter
from pydantic import SecretStr

from relaybatch.gateway import (
    GatewayClient,
    RateLimited,
    RetryPolicy,
    UnexpectedResponse,
    aiohttp_transport,
)
from relaybatch.gateway.exchange import HttpxExchange

KEY = "sk-test-direct-exchange"


class RecordingServer:
    """Reads each request (head and body) and answers with the next canned status and body."""

    def __init__(self, answers: list[tuple[int, dict[str, Any], dict[str, str]]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.server: asyncio.base_events.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._answer_each_request(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its pooled connection
        finally:
            writer.close()

    async def _answer_each_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
            headers = {}
            for header in header_lines:
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append((line, headers, body))
            status, document, extra = self.answers[min(len(self.requests), len(self.answers)) - 1]
            payload = json.dumps(document).encode()
            extra_lines = "".join(f"{name}: {value}\r\n" for name, value in extra.items())
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra_lines}"
                f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/api"

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def _send_through(transport: httpx.AsyncBaseTransport | None) -> tuple[str, dict[str, str], bytes]:
    server = RecordingServer([(200, CHAT_ANSWER, {})])
    async with (
        server as base_url,
        GatewayClient(base_url, SecretStr(KEY), transport=transport, headers={"x-extra": "1"}) as client,
    ):
        answer = await client.chat_completions(
            {"model": "m", "messages": [{"role": "user", "content": 'héllo "quoted"'}], "max_tokens": 3}
        )
        assert answer.choices[0].message.content == "hi"
    [request] = server.requests
    return request


async def test_the_aiohttp_transport_takes_the_direct_path() -> None:
    async with GatewayClient("http://127.0.0.1:9", SecretStr(KEY), transport=aiohttp_transport()) as client:
        assert not isinstance(client._sender.exchange, HttpxExchange)
    async with GatewayClient("http://127.0.0.1:9", SecretStr(KEY)) as client:
        assert isinstance(client._sender.exchange, HttpxExchange)


async def test_direct_requests_carry_what_the_httpx_path_sends() -> None:
    direct_line, direct_headers, direct_body = await _send_through(aiohttp_transport())
    httpx_line, httpx_headers, httpx_body = await _send_through(httpx.AsyncHTTPTransport())

    assert direct_line == httpx_line == "POST /api/v1/chat/completions HTTP/1.1"
    assert direct_body == httpx_body
    assert json.loads(direct_body)["messages"][0]["content"] == 'héllo "quoted"'
    # aiohttp names the encodings it decodes itself; everything else is the same.
    ignored = {"accept-encoding", "host"}
    assert {k: v for k, v in direct_headers.items() if k not in ignored} == {
        k: v for k, v in httpx_headers.items() if k not in ignored
    }
    assert direct_headers["authorization"] == f"Bearer {KEY}" and direct_headers["x-extra"] == "1"


async def test_query_parameters_are_sent_encoded_once() -> None:
    server = RecordingServer([(200, {"data": []}, {})])
    async with (
        server as base_url,
        GatewayClient(base_url, SecretStr(KEY), transport=aiohttp_transport()) as client,
    ):
        with pytest.raises(UnexpectedResponse):  # the canned answer is no price list; the request is
            await client.get_pricing("vendor/model name+1", provider="a&b")
    [(line, _, _)] = server.requests
    assert line == "GET /api/v1/models/pricing?model=vendor%2Fmodel+name%2B1&provider=a%26b HTTP/1.1"


async def test_answer_headers_reach_the_limiter_and_the_retry_rules() -> None:
    limited = {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
    server = RecordingServer(
        [
            (429, limited, {"Retry-After": "0", "X-RateLimit-Remaining-Requests": "0"}),
            (200, CHAT_ANSWER, {"X-RateLimit-Limit-Requests": "600"}),
        ]
    )
    limiter = RecordingLimiter()
    async with (
        server as base_url,
        GatewayClient(
            base_url,
            SecretStr(KEY),
            transport=aiohttp_transport(),
            limiter=limiter,
            retry=RetryPolicy(max_attempts=2),
        ) as client,
    ):
        await client.chat_completions({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert [status for status, _ in limiter.observed] == [429, 200]
    assert len(server.requests) == 2


async def test_an_error_answer_on_the_direct_path_keeps_its_headers() -> None:
    limited = {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
    server = RecordingServer([(429, limited, {"X-RateLimit-Reset-Requests": "7s"})])
    async with (
        server as base_url,
        GatewayClient(
            base_url, SecretStr(KEY), transport=aiohttp_transport(), retry=RetryPolicy(max_attempts=1)
        ) as client,
    ):
        with pytest.raises(RateLimited) as caught:
            await client.chat_completions({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert caught.value.rate_limit_headers == {"reset_requests_seconds": 7.0}
