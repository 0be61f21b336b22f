"""The web-search routes: GET /v1/websearch/{search,simple-search,search-news,reader}.

They answer in their own flat envelope ``{code, message}``: 400 for a missing ``q``/``url``, 401 for
a missing or invalid key, 403 for a revoked key or a balance that cannot pay the request, 503 with
``Retry-After`` when the search upstream's own limit (``media.search.upstream_rpm``) is reached. A
successful request costs the search model's per-request price (``generation.request.per_request``,
an emulator extension of the pricing object; 0.05 USD by default); failures are free.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable
from decimal import Decimal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.errors import ErrorShape, flat_error
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import emulator_state, models_of_kind, route_settings
from relaybatch.emulator.search.rules import (
    ROUTES,
    parse_reader_query,
    parse_search_query,
    reader_response,
    search_response,
)
from relaybatch.emulator.state import EmulatorState, request_body_hash

PREFIX = "/v1/websearch/"
WINDOW_SECONDS = 60.0
LEDGER_MODEL = "websearch"


def search_price(state: EmulatorState, fallback: Decimal) -> tuple[str, Decimal]:
    """(model id for the ledger, USD per successful request) from the catalog's search model."""
    for model in models_of_kind(state, ("search",)):
        pricing = state.price_for(model.id) or {}
        per_request = ((pricing.get("generation") or {}).get("request") or {}).get("per_request")
        if per_request is not None:
            return model.id, Decimal(str(per_request))
    return LEDGER_MODEL, fallback


def recent_searches(request: Request) -> dict[str, deque[float]]:
    """Times of each account's recent searches on this app (``app.state.searches``)."""
    searches: dict[str, deque[float]] | None = getattr(request.app.state, "searches", None)
    if searches is None:
        searches = {}
        request.app.state.searches = searches
    return searches


def upstream_wait(searches: dict[str, deque[float]], limit: int, account: str, now: float) -> float:
    """Seconds until the search upstream takes another call from this account (0: go ahead).

    A call that goes ahead is counted; a refused one is not; ``limit`` 0 means none.
    """
    if limit <= 0:
        return 0.0
    recent = searches.setdefault(account, deque())
    while recent and recent[0] <= now - WINDOW_SECONDS:
        recent.popleft()
    if len(recent) >= limit:
        return recent[0] + WINDOW_SECONDS - now
    recent.append(now)
    return 0.0


def _handler(route: str) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        account = authenticate(request, "bearer", shape=ErrorShape.FLAT)
        if isinstance(account, Response):
            return account
        state = emulator_state(request)
        settings = route_settings(request).search
        model, price = search_price(state, settings.fallback_usd_per_request)
        params = dict(request.query_params)
        try:
            if route == "reader":
                document = reader_response(parse_reader_query(params))
            else:
                query, count = parse_search_query(params)
                document = search_response(route, query, count)
        except InvalidRequest as problem:
            return flat_error(400, problem.message)
        if not state.can_afford(account, price):
            return flat_error(403, f"insufficient balance: a search costs {price} USD")
        wait = upstream_wait(recent_searches(request), settings.upstream_rpm, account.name, state.clock.now())
        if wait > 0:
            retry_after = str(max(1, math.ceil(wait)))
            return flat_error(
                503, "search upstream is rate limited; retry later", headers={"Retry-After": retry_after}
            )
        state.charge(account, PREFIX + route, model, price, {"requests": 1}, request_body_hash(request))
        return JSONResponse(document)

    handle.__name__ = f"websearch_{route.replace('-', '_')}"
    return handle


def routes() -> list[Route]:
    return [Route(PREFIX + route, _handler(route), methods=["GET"]) for route in ROUTES]
