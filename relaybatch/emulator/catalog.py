"""GET /v1/models (the catalog the account sees) and GET /v1/models/pricing (authoritative prices)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.codecs.fast_json import JSONResponse
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.prices import PriceProblem, choose_price
from relaybatch.emulator.state import EmulatorState

# The platform-mapping query parameter's name is not shown by the interface; this is the guess
# public-facts.md records, and clients keep it configurable.
MAPPING_PARAMETER = "mapping_id"


def display_name(model: ModelConfig) -> str:
    """A readable label generated from the id: ``relay-chat-small`` -> ``Relay Chat Small``."""
    if model.display_name:
        return model.display_name
    return " ".join(part.capitalize() if not part[:1].isdigit() else part for part in model.id.split("-"))


def catalog_entry(model: ModelConfig) -> dict[str, Any]:
    return {
        "id": model.id,
        "object": "model",
        "display_name": display_name(model),
        "type_target": model.type_target,
        "created_at": model.created_at,
    }


async def list_models(request: Request) -> Response:
    account = authenticate(request, "bearer_or_x_api_key")
    if isinstance(account, Response):
        return account
    state: EmulatorState = request.app.state.emulator
    data = [catalog_entry(model) for model in state.listed_models(account)]
    return JSONResponse({"object": "list", "data": data, "total": len(data)})


async def model_pricing(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    state: EmulatorState = request.app.state.emulator
    params = request.query_params
    model_id = params.get("model")
    if not model_id:
        return error_response(400, None, "query parameter 'model' is required")
    mapping_text = params.get(MAPPING_PARAMETER)
    mapping_id: int | None = None
    if mapping_text is not None:
        try:
            mapping_id = int(mapping_text)
        except ValueError:
            return error_response(400, None, f"'{MAPPING_PARAMETER}' must be an integer")
    model = state.model(model_id)
    if model is None:
        return error_response(404, None, f"model '{model_id}' does not exist")
    if not state.can_use(account, model):
        return error_response(403, None, f"this account has no access to model '{model_id}'")
    choice = choose_price(model, params.get("provider") or None, mapping_id)
    if isinstance(choice, PriceProblem):
        return error_response(choice.status, None, choice.message)
    data: dict[str, Any] = {
        "id": model.id,
        "display_name": display_name(model),
        "type_target": model.type_target,
    }
    if choice.provider is not None:
        data["provider"] = choice.provider
    data["pricing"] = choice.pricing
    return JSONResponse({"object": "pricing", "data": data})


def routes() -> list[Route]:
    return [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/pricing", model_pricing, methods=["GET"]),
    ]
