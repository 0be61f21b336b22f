"""The admin API under /_emulator/ (JSON, no rate limit, no faults): inspect and steer the emulator.

Open by default (the emulator listens on loopback). With an admin token (``create_app(...,
admin_token=...)``, ``relaybatch emulator serve --admin-token`` or RELAYBATCH_EMULATOR_ADMIN_TOKEN;
required when served beyond loopback) every admin route needs ``Authorization: Bearer <token>``
and answers 401 without it. The gateway's own API keys never open the admin API.

GET  /_emulator/requests[?since=T&distinct=false]  request log: total, a count per distinct
                                         (method, path, body hash), recent entries (those after
                                         Unix time T), each with its time and answer status
GET  /_emulator/videos                   V2 videos queued or rendering, per account and model
GET  /_emulator/ledger[?account=NAME]    every charge: account, route, model, usd (string),
                                         usage, body_hash, time
GET  /_emulator/accounts                 accounts with balance (string) and rate limit
POST /_emulator/accounts/{name}/balance  {"usd": "5.00"} adds to the balance (negative takes away)
POST /_emulator/clock/advance            {"seconds": 60} moves the emulator clock forward
GET  /_emulator/clock                    the emulator's now
GET  /_emulator/faults, PUT /_emulator/faults   the fault rules ({"seed": 0, "rules": [...]}, config syntax)
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relaybatch.emulator.clock import rfc3339
from relaybatch.emulator.codecs.fast_json import JSONResponse
from relaybatch.emulator.config import FaultsConfig
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.faults import FaultSyntaxError
from relaybatch.emulator.state import Account, EmulatorState


def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


async def _json_object(request: Request) -> dict[str, Any] | Response:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return error_response(400, None, "body is not valid JSON")
    if not isinstance(body, dict):
        return error_response(400, None, "body must be a JSON object")
    return body


async def requests_log(request: Request) -> Response:
    log = _state(request).requests
    query = request.query_params
    try:
        since = float(query.get("since", "-inf"))
    except ValueError:
        return error_response(400, None, "since must be a Unix time in seconds, e.g. since=1764000000.5")
    if query.get("distinct", "true") not in ("true", "false"):
        return error_response(400, None, "distinct must be true or false")
    answer: dict[str, Any] = {"total": _state(request).total_requests}
    if query.get("distinct", "true") == "true":
        answer["distinct"] = [
            {"method": method, "path": path, "body_hash": body_hash, "count": count}
            for (method, path, body_hash), count in log.counts.items()
        ]
    answer["recent"] = [
        {
            "method": r.method,
            "path": r.path,
            "body_hash": r.body_hash,
            "account": r.account,
            "time": rfc3339(r.time),
            "at": r.time,
            "status": r.status,
        }
        for r in log.recent
        if r.time > since
    ]
    return JSONResponse(answer)


async def videos(request: Request) -> Response:
    """V2 videos queued or rendering now (what a ``video.max_in_flight`` cap counts), per account
    and model."""
    from relaybatch.emulator.media.store import MediaStore

    now = _state(request).clock.now()
    store: MediaStore | None = getattr(request.app.state, "media", None)
    counts: dict[tuple[str, str], int] = {}
    for job in store.videos.values() if store is not None else ():
        if not job.deleted and job.rendering(now):
            counts[(job.account, job.model)] = counts.get((job.account, job.model), 0) + 1
    in_flight = [{"account": a, "model": m, "count": n} for (a, m), n in sorted(counts.items())]
    return JSONResponse({"at": now, "in_flight": in_flight})


async def ledger(request: Request) -> Response:
    account = request.query_params.get("account")
    charges = [c.as_json() for c in _state(request).ledger if account is None or c.account == account]
    total = sum((Decimal(c["usd"]) for c in charges), Decimal(0))
    return JSONResponse({"charges": charges, "total_usd": str(total)})


def _account_json(account: Account) -> dict[str, Any]:
    return {
        "name": account.name,
        "balance_usd": str(account.balance),
        "rate_limit_rpm": account.rate_limit_rpm,
    }


async def accounts(request: Request) -> Response:
    return JSONResponse({"accounts": [_account_json(a) for a in _state(request).accounts.values()]})


async def top_up(request: Request) -> Response:
    body = await _json_object(request)
    if isinstance(body, Response):
        return body
    try:
        usd = Decimal(str(body["usd"]))
    except (KeyError, InvalidOperation):
        return error_response(400, None, 'body needs \'usd\' as a decimal string, e.g. {"usd": "5.00"}')
    account = _state(request).top_up(request.path_params["name"], usd)
    if account is None:
        return error_response(404, None, f"no account '{request.path_params['name']}'")
    return JSONResponse(_account_json(account))


async def clock_now(request: Request) -> Response:
    clock = _state(request).clock
    return JSONResponse({"now": clock.now(), "iso": clock.isoformat()})


async def clock_advance(request: Request) -> Response:
    body = await _json_object(request)
    if isinstance(body, Response):
        return body
    seconds = body.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return error_response(400, None, "body needs 'seconds' as a non-negative number")
    try:
        _state(request).clock.advance(float(seconds))
    except (ValueError, OverflowError) as error:
        return error_response(400, None, f"'seconds': {error}")
    return await clock_now(request)


async def faults(request: Request) -> Response:
    injector = _state(request).faults
    if request.method == "PUT":
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        try:
            injector.replace(FaultsConfig.model_validate(body))
        except (ValidationError, FaultSyntaxError) as error:
            return error_response(400, None, f"bad fault settings: {error}")
    return JSONResponse(injector.config.model_dump())


Endpoint = Callable[[Request], Awaitable[Response]]


def admin_refusal(request: Request) -> Response | None:
    """401 when the app has an admin token and the request does not present it, else None."""
    token: str | None = getattr(request.app.state, "admin_token", None)
    if not token:
        return None
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(presented.strip().encode(), token.encode()):
        return None
    return error_response(
        401,
        None,
        "the admin API needs 'Authorization: Bearer <admin token>' "
        "(the token given to relaybatch emulator serve)",
        headers={"WWW-Authenticate": 'Bearer realm="relaybatch-emulator-admin"'},
    )


def _guarded(endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        return admin_refusal(request) or await endpoint(request)

    guarded.__name__ = endpoint.__name__
    return guarded


def routes() -> list[Route]:
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/_emulator/requests", requests_log, ["GET"]),
        ("/_emulator/videos", videos, ["GET"]),
        ("/_emulator/ledger", ledger, ["GET"]),
        ("/_emulator/accounts", accounts, ["GET"]),
        ("/_emulator/accounts/{name}/balance", top_up, ["POST"]),
        ("/_emulator/clock", clock_now, ["GET"]),
        ("/_emulator/clock/advance", clock_advance, ["POST"]),
        ("/_emulator/faults", faults, ["GET", "PUT"]),
    ]
    return [Route(path, _guarded(endpoint), methods=methods) for path, endpoint, methods in table]
