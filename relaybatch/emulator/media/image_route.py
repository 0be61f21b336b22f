"""POST /v1/images/generations: auth, validation, billing, real image bytes, padding."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator.auth import authenticate
from relaybatch.emulator.billing import TokenCounts, generation_cost, token_cost
from relaybatch.emulator.codecs.images import render_dimensions, render_image
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.media.image_rules import (
    ImageModelTraits,
    ImageRequest,
    image_seed,
    image_usage,
    revised_prompt,
    validate_image_request,
)
from relaybatch.emulator.media.padding import padded_json_response
from relaybatch.emulator.media.store import SAFETY_TRIGGER, has_trigger
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.route_common import (
    emulator_state,
    invalid,
    json_object,
    missing_price,
    resolve_model,
    route_settings,
)
from relaybatch.emulator.route_settings import RouteSettings
from relaybatch.emulator.state import Account, EmulatorState, request_body_hash

ROUTE = "/v1/images/generations"
# Per-request simulated upstream latency (seconds). The x-emulator-fault ``latency=`` directive
# instead delays the whole request before the route runs, so it never produces padding.
UPSTREAM_LATENCY_HEADER = "x-emulator-upstream-latency"
# Pictures up to this many pixels in total are drawn on the event loop (see produce()).
INLINE_RENDER_PIXELS = 4 * 256 * 256


def image_cost(pricing: dict[str, Any], request: ImageRequest, usage: dict[str, Any]) -> Decimal:
    """Per image for generation-priced models, else the token prices of the usage."""
    if pricing.get("kind") == "generation":
        return generation_cost(pricing, images=request.n)
    counts = TokenCounts(
        input=usage["input_tokens_details"]["text_tokens"],
        input_image=usage["input_tokens_details"]["image_tokens"],
        output=usage["output_tokens_details"]["text_tokens"],
        output_image=usage["output_tokens_details"]["image_tokens"],
    )
    return token_cost(pricing, counts)


def upstream_latency(request: Request, model: ModelConfig, settings: RouteSettings) -> float:
    header = request.headers.get(UPSTREAM_LATENCY_HEADER)
    if header is not None:
        try:
            value = float(header)
        except ValueError:
            raise InvalidRequest(f"{UPSTREAM_LATENCY_HEADER} must be a number of seconds") from None
        if value < 0:
            raise InvalidRequest(f"{UPSTREAM_LATENCY_HEADER} must not be negative")
        return value
    return float(model.options.get("upstream_seconds", settings.images.upstream_seconds))


def _image_body(
    request: ImageRequest, traits: ImageModelTraits, usage: dict[str, Any], created: int, max_edge: int
) -> bytes:
    data = []
    for index in range(request.n):
        picture = render_image(
            request.width,
            request.height,
            seed=image_seed(request, index),
            output_format=request.output_format,
            transparent=request.background == "transparent",
            compression=request.output_compression,
            max_edge=max_edge,
        )
        entry: dict[str, Any] = {"b64_json": base64.b64encode(picture).decode("ascii")}
        if traits.revised_prompt:
            entry["revised_prompt"] = revised_prompt(request)
        data.append(entry)
    document = {
        "created": created,
        "data": data,
        "size": request.size,
        "quality": request.quality,
        "output_format": request.output_format,
        "background": request.background,
        "usage": usage,
    }
    return json.dumps(document).encode()


async def _accepted(
    request: Request, state: EmulatorState, account: Account, settings: RouteSettings
) -> tuple[ModelConfig, ImageModelTraits, ImageRequest, float]:
    """Model, its traits, the validated request and the upstream latency; or InvalidRequest."""
    body = await json_object(request)
    model = resolve_model(state, account, body.get("model"), ("image",), ROUTE)
    if model.type_target == "gemini":
        raise InvalidRequest(
            f"model '{model.id}' is not served by {ROUTE}: generate-content image models "
            f"generate through POST /v1beta/models/{model.id}:generateContent",
            param="model",
        )
    traits = ImageModelTraits.from_options(model.options)
    image_request = validate_image_request(
        body, model=model.id, traits=traits, max_edge=settings.images.max_custom_edge
    )
    latency = upstream_latency(request, model, settings)
    if has_trigger(image_request.prompt, SAFETY_TRIGGER):
        # The public analogue refuses such prompts with a 400 before any work, free of charge.
        raise InvalidRequest(
            "your request was rejected by the safety system (moderation_blocked)", param="prompt"
        )
    return model, traits, image_request, latency


async def images_generations(request: Request) -> Response:
    account = authenticate(request, "bearer")
    if isinstance(account, Response):
        return account
    state = emulator_state(request)
    settings = route_settings(request)
    try:
        model, traits, image_request, latency = await _accepted(request, state, account, settings)
    except InvalidRequest as problem:
        return invalid(problem)
    pricing = state.price_for(model.id)
    if pricing is None:
        return missing_price(model.id)
    usage = image_usage(image_request, traits)
    cost = image_cost(pricing, image_request, usage)
    refused = state.charge(account, ROUTE, model.id, cost, usage, request_body_hash(request))
    if refused is not None:
        return refused
    created = int(state.clock.now())

    max_edge = settings.images.render_max_edge
    drawn_width, drawn_height = render_dimensions(image_request.width, image_request.height, max_edge)

    async def produce() -> bytes:
        # Small pictures take a few milliseconds: a worker-thread hop would cost more than it
        # saves. Large ones (full-size rendering) go to a thread so the event loop keeps serving.
        if drawn_width * drawn_height * image_request.n <= INLINE_RENDER_PIXELS:
            return _image_body(image_request, traits, usage, created, max_edge)
        return await run_in_threadpool(_image_body, image_request, traits, usage, created, max_edge)

    return await padded_json_response(produce, latency, settings.padding)
