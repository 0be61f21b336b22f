"""The emulator's ASGI app: a local Model Relay Gateway that the runner and the official SDKs talk to.

Routes come from one package per kind of work, each exposing ``routes() -> list[Route]``: the
catalog, the text families, media (images, video), typed judgment, web search and the admin API.
``GatewayMiddleware`` applies the request log, rate limits and faults to every public route, so
route modules never do.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator import judgment, media, search, text
from relaybatch.emulator.admin import routes as admin_routes
from relaybatch.emulator.catalog import routes as catalog_routes
from relaybatch.emulator.clock import Clock
from relaybatch.emulator.config import EmulatorConfig, load_config
from relaybatch.emulator.errors import shape_for_path, shaped_error
from relaybatch.emulator.middleware import GatewayMiddleware
from relaybatch.emulator.state import EmulatorState

# Paths clients reach by mistake, with where the route really is. The OpenAI SDK's videos resource
# posts to {base_url}/videos, so a client built for chat (base .../v1) lands on /v1/videos.
MISROUTED = {
    "/v1/videos": "video V2 is at /v2/videos: give the OpenAI SDK's videos calls base_url=<emulator>/v2",
}


def _misrouted_hint(path: str) -> str:
    for prefix, hint in MISROUTED.items():
        if path == prefix or (path.startswith(prefix + "/") and not path.startswith(prefix + "/generations")):
            return f" ({hint})"
    return ""


async def _http_error(request: Request, exc: Exception) -> Response:
    """404 for unknown paths, 405 for a wrong method: the interface's envelope, not plain text."""
    assert isinstance(exc, HTTPException)
    shape = shape_for_path(request.url.path)
    if exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    elif exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}{_misrouted_hint(request.url.path)}"
    else:
        message = str(exc.detail)
    response = shaped_error(shape, exc.status_code, message)
    response.headers.update(exc.headers or {})
    return response


def create_app(
    config: EmulatorConfig | None = None, *, clock: Clock | None = None, admin_token: str | None = None
) -> Starlette:
    """Build an emulator app; each app has its own state, so tests never share accounts or logs.

    ``admin_token``: when given, the admin API (/_emulator/) needs it as a Bearer token.
    """
    routes: list[Any] = [
        *catalog_routes(),
        *text.routes(),
        *media.routes(),
        *judgment.routes(),
        *search.routes(),
        *admin_routes(),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GatewayMiddleware)],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.emulator = EmulatorState(config or load_config(), clock)
    app.state.admin_token = admin_token or None
    return app
