"""POST /v1/typedjudge: auth, validation, billing at the judgment model's input-token price."""

from __future__ import annotations

from decimal import Decimal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.billing import TokenCounts, token_cost
from relaybatch.emulator.errors import error_response
from relaybatch.emulator.judgment.rules import judge, judgment_usage, validate_judgment_request
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import (
    emulator_state,
    invalid,
    json_object,
    models_of_kind,
    route_settings,
)
from relaybatch.emulator.state import request_body_hash

ROUTE = "/v1/typedjudge"
PER_MILLION = Decimal(1_000_000)


async def typed_judgment(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    state = emulator_state(request)
    settings = route_settings(request).judgment
    judgment_models = {m.id for m in models_of_kind(state, ("judgment",))}
    try:
        body = await json_object(request)
        questions = validate_judgment_request(body, judgment_models=judgment_models)
    except InvalidRequest as problem:
        return invalid(problem)
    model = str(body["model"])
    catalog_entry = state.model(model)
    if catalog_entry is None or not state.can_use(account, catalog_entry):
        return error_response(403, None, f"this account has no access to model '{model}'")
    usage = judgment_usage(body["state"], questions)
    pricing = state.price_for(model)
    # Output is free whatever the table says: only input tokens are priced.
    if pricing is not None:
        cost = token_cost(pricing, TokenCounts(input=usage["input_tokens"]))
    else:
        cost = usage["input_tokens"] * settings.fallback_usd_per_million_input / PER_MILLION
    refused = state.charge(account, ROUTE, model, cost, usage, request_body_hash(request))
    if refused is not None:
        return refused
    return JSONResponse(
        {"model": model + settings.build_suffix, "answers": judge(body["state"], questions), "usage": usage}
    )
