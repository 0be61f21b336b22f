"""One attempt, one whole answer: how plain JSON calls reach the gateway.

Most requests of a batch run are plain JSON in, plain JSON out: the sender needs the status, the
headers and the whole body, nothing streamed. ``HttpxExchange`` gets them through the
``httpx.AsyncClient`` (any transport: ASGI in tests, httpx's own pool). A transport may offer a
faster exchange of its own through a ``direct_exchange()`` method; the aiohttp socket transport
does (socket_transport.py), skipping httpx's request, response and header models, which cost more
CPU per request than aiohttp itself (benchmarks/RESULTS.md, "gateway client").

Either way a failure to send or to read the body is an ``httpx.TransportError`` whose cause is the
original exception, so the sender classifies it by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from relaybatch.gateway.request_building import RequestParts


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer; ``headers`` look names up case-insensitively."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Exchange(Protocol):
    async def __call__(self, parts: RequestParts) -> Answer: ...


class HttpxExchange:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def __call__(self, parts: RequestParts) -> Answer:
        # Not streamed: httpx reads the whole body and releases the connection before returning.
        response = await self._http.send(parts.httpx_request())
        return Answer(response.status_code, response.headers, response.content)


def exchange_for(http: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None) -> Exchange:
    """The transport's own exchange when it offers one, else the httpx client's."""
    direct = getattr(transport, "direct_exchange", None)
    return direct() if callable(direct) else HttpxExchange(http)
