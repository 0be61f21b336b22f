"""The aiohttp socket transport, and its fast exchange for plain JSON calls.

Imported only when a socket transport is made: aiohttp takes half a second to import, which
commands that never open a socket (``--help``, ``plan``, the embedded emulator) should not pay.

``AiohttpExchange`` sends through the transport's own ``aiohttp.ClientSession`` (one connection
pool for both paths) with what ``httpx_aiohttp`` would send: the same URL, headers, body and
timeouts, redirects not followed, and failures mapped to the same httpx exceptions with the aiohttp
exception as their cause. One difference, on purpose: aiohttp, not httpx, decodes a compressed
answer here, so ``Accept-Encoding`` is left for aiohttp to set to what it can decode.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import yarl
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import map_aiohttp_exceptions

from relaybatch.gateway.exchange import Answer
from relaybatch.gateway.request_building import RequestParts


class SharedSessionTransport(AiohttpTransport):
    """httpx_aiohttp's transport, lending its session to ``AiohttpExchange``."""

    def session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running loop, exactly as the transport would make it."""
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        return self.client

    def direct_exchange(self) -> AiohttpExchange:
        return AiohttpExchange(self)


class AiohttpExchange:
    def __init__(self, transport: SharedSessionTransport) -> None:
        self._transport = transport

    async def __call__(self, parts: RequestParts) -> Answer:
        timeout = parts.timeout
        with map_aiohttp_exceptions():
            async with self._transport.session().request(
                parts.method,
                # Already encoded by httpx; yarl must not quote it a second time.
                yarl.URL(str(parts.url), encoded=True),
                headers=self._without_accept_encoding(parts.headers),
                data=parts.content,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                    connect=timeout.get("pool"),
                ),
            ) as response:
                body = await response.read()
        return Answer(response.status, response.headers, body)

    @staticmethod
    def _without_accept_encoding(headers: Mapping[str, str]) -> dict[str, str]:
        return {name: value for name, value in headers.items() if name.lower() != "accept-encoding"}
