"""Build the gateway client a run uses: the real gateway over sockets, or the embedded emulator."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import httpx
from starlette.applications import Starlette

from relaybatch.gateway import ClientTimeouts, GatewayClient, RetryPolicy, RouteSettings, aiohttp_transport
from relaybatch.limiting import Limiter
from relaybatch.settings import Settings

# The ASGI transport needs a base URL with a host; nothing is resolved or dialled.
EMBEDDED_BASE_URL = "http://emulator.local"


def embedded_emulator(config: Path | None = None) -> Starlette:
    """The process-wide embedded emulator of a config file (None: the shipped one): runs in one
    process share it as they would a gateway."""
    return _embedded_emulator(config)


@lru_cache(maxsize=4)
def _embedded_emulator(config: Path | None) -> Starlette:  # one cache key per file, however called
    from relaybatch.emulator import create_app, load_config

    return create_app(load_config(config))


def forget_embedded_emulators() -> None:
    """The next run of this process gets new embedded emulators (tests that change the config)."""
    _embedded_emulator.cache_clear()


def open_client(
    settings: Settings,
    limiter: Limiter | None = None,
    *,
    retry: RetryPolicy | None = None,
    timeouts: ClientTimeouts | None = None,
    routes: RouteSettings | None = None,
) -> GatewayClient:
    """A client for the configured gateway; the caller closes it (``async with``). ``retry``,
    ``timeouts`` and ``routes`` given here win over the settings' own.

    Real sockets go through the aiohttp transport (httpx's own pool slows sharply past a few
    dozen connections); the embedded emulator is called in-process through ASGI.
    """
    api_key = settings.resolved_api_key()
    transport: httpx.AsyncBaseTransport
    if settings.uses_embedded_emulator:
        emulator = embedded_emulator(settings.emulator_config)
        base_url, transport = EMBEDDED_BASE_URL, httpx.ASGITransport(app=emulator)
    else:
        assert settings.base_url is not None
        base_url, transport = settings.base_url, aiohttp_transport()
    return GatewayClient(
        base_url,
        api_key,
        transport=transport,
        limiter=limiter,
        retry=retry or settings.retry,
        timeouts=timeouts or settings.timeouts,
        routes=routes or settings.routes,
    )
