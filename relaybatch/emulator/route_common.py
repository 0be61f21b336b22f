"""What the media, judgment and search routes share: their settings, body parsing, model lookup.

The settings (the config file's ``media:`` mapping) are parsed once per app and kept on the
Starlette app's state, so each app has its own, exactly as it has its own accounts and ledger.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator import parsing
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_settings import RouteSettings, parse_route_settings
from relaybatch.emulator.state import Account, EmulatorState, request_body


def emulator_state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


def route_settings(request: Request) -> RouteSettings:
    """This app's media, judgment and search settings, parsed on first use."""
    settings: RouteSettings | None = getattr(request.app.state, "route_settings", None)
    if settings is None:
        settings = parse_route_settings(emulator_state(request).config.media)
        request.app.state.route_settings = settings
    return settings


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


async def json_object(request: Request) -> dict[str, Any]:
    """The request body (as the middleware read it) as a JSON object, or InvalidRequest."""
    return parsing.json_object(await request_body(request))


def invalid(problem: InvalidRequest) -> Response:
    return error_response(problem.status, None, problem.message)


def models_of_kind(state: EmulatorState, kinds: Iterable[str]) -> list[ModelConfig]:
    wanted = set(kinds)
    return sorted((m for m in state.models.values() if m.kind in wanted), key=lambda m: m.id)


def resolve_model(
    state: EmulatorState, account: Account, model_id: Any, kinds: tuple[str, ...], route: str
) -> ModelConfig:
    """The catalog entry for a request's ``model``; 400 when missing, unknown or of another kind,
    403 when the account may not use it (as the core's routes answer)."""
    if not isinstance(model_id, str) or not model_id:
        raise InvalidRequest("'model' is required", param="model")
    model = state.model(model_id)
    if model is None:
        raise InvalidRequest(f"unknown model '{model_id}'", param="model")
    if not state.can_use(account, model):
        raise InvalidRequest(f"this account has no access to model '{model_id}'", param="model", status=403)
    if model.kind not in kinds:
        usable = ", ".join(m.id for m in models_of_kind(state, kinds) if state.can_use(account, m))
        raise InvalidRequest(
            f"model '{model_id}' is not served by {route}; models for this route: {usable or 'none'}",
            param="model",
        )
    return model


def missing_price(model_id: str) -> Response:
    return error_response(500, None, f"emulator configuration: model '{model_id}' has no price")
