"""Transports: aiohttp-backed sockets for real runs, and how to read a transport failure.

httpx's own async pool slows sharply past a few dozen connections (shared/research/http-client.md),
so real sockets go through ``httpx_aiohttp.AiohttpTransport``; tests and the embedded emulator
use ``httpx.ASGITransport``. Our subclass (socket_transport.py) also lends its aiohttp session to
the plain-JSON fast path, so both paths share one connection pool.

The aiohttp transport maps *every* aiohttp connection error, a server disconnect after the
request included, to ``httpx.ConnectTimeout``. Deciding "was anything sent?" from the httpx class
alone would retry a billed create the gateway already received, so ``never_sent`` looks at the
original aiohttp exception.
"""

from __future__ import annotations

import httpx

# Above what one execution can have in flight (the manifest's concurrency, at most 1024, the
# poller's 32 and a pricing call), so a request never waits for a connection once the engine has
# written its item `sending` (docs/engine.md, "Sending"). Connections open only as requests need them.
DEFAULT_MAX_CONNECTIONS = 2048
# Idle pooled connections are dropped before common servers drop them (uvicorn: 5 s), so a request
# is rarely written to a socket the server is closing, which would read as "sent, no answer".
KEEPALIVE_EXPIRY_SECONDS = 4.0


def aiohttp_transport(max_connections: int = DEFAULT_MAX_CONNECTIONS) -> httpx.AsyncBaseTransport:
    """The socket transport for a real gateway (or an emulator served over HTTP)."""
    from relaybatch.gateway.socket_transport import SharedSessionTransport

    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
    )
    return SharedSessionTransport(limits=limits)


def never_sent(exc: httpx.TransportError) -> bool:
    """True when the failure happened before any byte of the request left this process."""
    cause = exc.__cause__
    if cause is not None and type(cause).__module__.startswith("aiohttp"):
        import aiohttp

        # Connector errors (refused, DNS, TLS) and connect timeouts fail before the request is written.
        return isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
