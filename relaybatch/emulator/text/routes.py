"""The text routes: chat completions, responses, messages and generate-content, native and converter.

Every call follows the same steps: authenticate with the format's header, read the body, find the
model (unknown 400, not visible 403, not a chat model 400, another family on a native route 400),
synthesize the reply, bill it (402 before anything is produced), then answer as JSON or a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relaybatch.emulator.auth import Scheme, authenticate, default_shape
from relaybatch.emulator.billing import token_cost
from relaybatch.emulator.codecs.fast_json import JSONResponse
from relaybatch.emulator.codecs.sse import frames_response
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.errors import ErrorShape, shaped_error
from relaybatch.emulator.faults import INVALID_JSON
from relaybatch.emulator.parsing import json_object, optional_bool
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.state import Account, EmulatorState, request_body, request_body_hash
from relaybatch.emulator.text import chat, generate_content, messages, responses
from relaybatch.emulator.text.answer import Answer
from relaybatch.emulator.text.converters import Format, family_mismatch, project_counts
from relaybatch.emulator.text.image_reply import image_reply
from relaybatch.emulator.text.synth import ChatRequest, Reply, request_digest, structured, synthesize


@dataclass(frozen=True)
class TextFormat:
    name: Format
    scheme: Scheme
    parse: Callable[[dict[str, Any], str | None], ChatRequest]
    render: Callable[[Answer], dict[str, Any]]
    stream: Callable[[Answer, dict[str, Any]], Iterator[bytes]]


FORMATS: dict[Format, TextFormat] = {
    "chat_completions": TextFormat("chat_completions", "bearer", chat.parse, chat.render, chat.stream),
    "responses": TextFormat("responses", "bearer", responses.parse, responses.render, responses.stream),
    "messages": TextFormat("messages", "anthropic", messages.parse, messages.render, messages.stream),
    "generate_content": TextFormat(
        "generate_content", "goog", generate_content.parse, generate_content.render, generate_content.stream
    ),
}


class Refusal(Exception):
    """A request answered with an error before any work; carries the ready response."""

    def __init__(self, response: Response) -> None:
        self.response = response


def _model(state: EmulatorState, account: Account, model_id: str, shape: ErrorShape) -> ModelConfig:
    model = state.model(model_id)
    if model is None:
        raise Refusal(shaped_error(shape, 400, f"unknown model '{model_id}' (GET /v1/models lists them)"))
    if not state.can_use(account, model):
        raise Refusal(shaped_error(shape, 403, f"this account has no access to model '{model_id}'"))
    return model


async def _reply(
    request: Request,
    fmt: TextFormat,
    model: ModelConfig,
    parsed: ChatRequest,
    body: dict[str, Any],
    converter: bool,
) -> Reply:
    shape = default_shape(fmt.scheme)
    if model.kind == "image" and fmt.name == "generate_content":
        outcome = await image_reply(request, model, body)
        if isinstance(outcome, Response):
            raise Refusal(outcome)
        return outcome
    if model.kind != "chat":
        raise Refusal(
            shaped_error(shape, 400, f"model '{model.id}' is a {model.kind} model, not a chat model")
        )
    if not converter:
        mismatch = family_mismatch(fmt.name, model.type_target, model.id)
        if mismatch:
            raise Refusal(shaped_error(shape, 400, mismatch))
    return synthesize(parsed, model)


def _refusal_before_parse(fmt: TextFormat, body: dict[str, Any], converter: bool) -> str | None:
    if fmt.name != "responses":
        return None
    return responses.converter_refusal(body) if converter else responses.native_refusal(body)


async def handle_text(
    request: Request, fmt: TextFormat, *, converter: bool, path_model: str | None, stream: bool
) -> Response:
    state: EmulatorState = request.app.state.emulator
    shape = default_shape(fmt.scheme)
    account = authenticate(request, fmt.scheme)
    if isinstance(account, Response):
        return account
    try:
        body = json_object(await request_body(request))
        refusal = _refusal_before_parse(fmt, body, converter)
        if refusal:
            raise InvalidRequest(refusal)
        parsed = fmt.parse(body, path_model)
        parsed.invalid_json = bool(request.scope.get("state", {}).get(INVALID_JSON)) and structured(parsed)
        stream = stream or optional_bool(body, "stream")
        model = _model(state, account, parsed.model, shape)
        reply = await _reply(request, fmt, model, parsed, body, converter)
    except InvalidRequest as error:
        return shaped_error(shape, 400, str(error))
    except Refusal as refused:
        return refused.response
    counts = project_counts(reply.counts, fmt.name)
    pricing = state.price_for(model.id)
    usd = token_cost(pricing, counts) if pricing else Decimal(0)
    usage: dict[str, Any] = {"format": fmt.name, **counts.as_dict()}
    if parsed.invalid_json:
        usage["fault"] = INVALID_JSON  # so a test can sum the bill of the broken answers
    unpaid = state.charge(
        account, request.url.path, model.id, usd, usage, request_body_hash(request), shape=shape
    )
    if unpaid is not None:
        return unpaid
    digest = reply.digest or request_digest(parsed)
    answer = Answer(reply, counts, model.id, digest, int(state.clock.now()))
    if not stream:
        return JSONResponse(fmt.render(answer))
    if fmt.name == "generate_content" and request.query_params.get("alt") != "sse":
        return frames_response(generate_content.stream_json_array(answer, body), "application/json")
    return frames_response(fmt.stream(answer, body))


def _text_endpoint(fmt_name: Format, *, converter: bool) -> Callable[[Request], Any]:
    fmt = FORMATS[fmt_name]

    async def endpoint(request: Request) -> Response:
        return await handle_text(request, fmt, converter=converter, path_model=None, stream=False)

    return endpoint


def _generate_content_endpoint(*, converter: bool) -> Callable[[Request], Any]:
    fmt = FORMATS["generate_content"]

    async def endpoint(request: Request) -> Response:
        model, _, action = request.path_params["target"].partition(":")
        if action not in ("generateContent", "streamGenerateContent"):
            message = f"no route {request.method} {request.url.path}"
            return shaped_error(ErrorShape.GENERATE_CONTENT, 404, message)
        stream = action == "streamGenerateContent"
        return await handle_text(request, fmt, converter=converter, path_model=model, stream=stream)

    return endpoint


def routes() -> list[Route]:
    native = [
        ("/v1/chat/completions", "chat_completions"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
    ]
    converters = [
        ("/openai/v1/chat/completions", "chat_completions"),
        ("/openai/v1/responses", "responses"),
        ("/anthropic/v1/messages", "messages"),
    ]
    table: list[Route] = []
    for path, name in native:
        table.append(Route(path, _text_endpoint(name, converter=False), methods=["POST"]))  # type: ignore[arg-type]
    for path, name in converters:
        table.append(Route(path, _text_endpoint(name, converter=True), methods=["POST"]))  # type: ignore[arg-type]
    table.append(
        Route("/v1beta/models/{target}", _generate_content_endpoint(converter=False), methods=["POST"])
    )
    table.append(
        Route("/gemini/v1beta/models/{target}", _generate_content_endpoint(converter=True), methods=["POST"])
    )
    return table
