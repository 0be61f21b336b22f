"""Build the gateway client a run uses: the real gateway over sockets, or the embedded emulator."""

from __future__ import annotations

from functools import lru_cache

import httpx
from starlette.applications import Starlette

from relaybatch.gateway import GatewayClient
from relaybatch.limiting import Limiter
from relaybatch.settings import Settings

# The ASGI transport needs a base URL with a host; nothing is resolved or dialled.
EMBEDDED_BASE_URL = "http://emulator.local"


@lru_cache(maxsize=1)
def embedded_emulator() -> Starlette:
    """The process-wide embedded emulator: runs in one process share it as they would a gateway."""
    from relaybatch.emulator import create_app, load_config

    return create_app(load_config(Settings().emulator_config))


def open_client(settings: Settings, limiter: Limiter | None = None) -> GatewayClient:
    """A client for the configured gateway; the caller closes it (``async with``)."""
    api_key = settings.resolved_api_key()
    if settings.uses_embedded_emulator:
        transport: httpx.AsyncBaseTransport = httpx.ASGITransport(app=embedded_emulator())
        return GatewayClient(EMBEDDED_BASE_URL, api_key, transport=transport, limiter=limiter)
    from httpx_aiohttp import AiohttpTransport

    assert settings.base_url is not None
    return GatewayClient(settings.base_url, api_key, transport=AiohttpTransport(), limiter=limiter)
