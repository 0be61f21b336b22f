"""The four chat families against the emulator: native and converter routes, the right auth
headers, and streamed answers that aggregate to exactly the non-streamed answer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from gateway_support import ClientFactory
from starlette.applications import Starlette

from relaybatch.gateway import ChatCompletion, GatewayClient, GenerateContentResponse, Message, Response

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def _chat(client: GatewayClient, model: str, stream: bool, converter: bool, tools: bool) -> Any:
    request: dict[str, Any] = {"model": model, "messages": _user("weather in Paris, please")}
    if tools:
        request.update(tools=[CHAT_TOOL], tool_choice="auto")
    return await client.chat_completions(request, stream=stream, converter=converter)


async def _responses(client: GatewayClient, model: str, stream: bool, converter: bool, tools: bool) -> Any:
    request: dict[str, Any] = {"model": model, "input": "weather in Paris, please"}
    if tools:
        request["tools"] = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}]
    return await client.responses(request, stream=stream, converter=converter)


async def _messages(client: GatewayClient, model: str, stream: bool, converter: bool, tools: bool) -> Any:
    request: dict[str, Any] = {"model": model, "messages": _user("weather in Paris"), "max_tokens": 200}
    if tools:
        request["tools"] = [{"name": "get_weather", "input_schema": WEATHER_SCHEMA}]
    return await client.messages(request, stream=stream, converter=converter)


async def _generate(client: GatewayClient, model: str, stream: bool, converter: bool, tools: bool) -> Any:
    request: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "weather in Paris"}]}]}
    if tools:
        request["tools"] = [{"functionDeclarations": [{"name": "get_weather", "parameters": WEATHER_SCHEMA}]}]
    return await client.generate_content(model, request, stream=stream, converter=converter)


def essentials(result: Any) -> dict[str, Any]:
    """What a caller relies on: text, tool calls, usage and finish reason (plus id and model)."""
    if isinstance(result, ChatCompletion):
        choice = result.choices[0]
        calls = [call.model_dump() for call in choice.message.tool_calls or []]
        usage = result.usage.model_dump() if result.usage else None
        return {
            "id": result.id,
            "model": result.model,
            "text": choice.message.content,
            "tools": calls,
            "usage": usage,
            "finish": choice.finish_reason,
        }
    if isinstance(result, Response):
        calls = [
            (item.name, item.arguments, item.call_id)
            for item in result.output
            if item.type == "function_call"
        ]
        usage = result.usage.model_dump() if result.usage else None
        return {
            "id": result.id,
            "model": result.model,
            "text": result.output_text,
            "tools": calls,
            "usage": usage,
            "finish": result.status,
        }
    if isinstance(result, Message):
        calls = [(block.id, block.name, block.input) for block in result.content if block.type == "tool_use"]
        return {
            "id": result.id,
            "model": result.model,
            "text": result.text,
            "tools": calls,
            "usage": result.usage.model_dump(),
            "finish": result.stop_reason,
        }
    assert isinstance(result, GenerateContentResponse)
    candidate = result.candidates[0]
    calls = [part.functionCall for part in candidate.content.parts if part.functionCall]
    usage = result.usageMetadata.model_dump() if result.usageMetadata else None
    return {
        "id": result.responseId,
        "model": result.modelVersion,
        "text": result.text,
        "tools": calls,
        "usage": usage,
        "finish": candidate.finishReason,
    }


FAMILIES = [
    pytest.param(_chat, "relay-chat-reasoner", False, id="chat-completions"),
    pytest.param(_chat, "relay-claude-haiku", True, id="chat-completions-converter"),
    pytest.param(_responses, "relay-chat-reasoner", False, id="responses"),
    pytest.param(_responses, "relay-gemini-flash", True, id="responses-converter"),
    pytest.param(_messages, "relay-claude-sonnet", False, id="messages"),
    pytest.param(_messages, "relay-chat-small", True, id="messages-converter"),
    pytest.param(_generate, "relay-gemini-pro", False, id="generate-content"),
    pytest.param(_generate, "relay-claude-haiku", True, id="generate-content-converter"),
]


@pytest.mark.parametrize(("call", "model", "converter"), FAMILIES)
@pytest.mark.parametrize("tools", [False, True], ids=["text", "tools"])
async def test_streamed_answer_equals_the_plain_answer(
    make_client: ClientFactory, call: Any, model: str, converter: bool, tools: bool
) -> None:
    async with make_client() as client:
        plain = essentials(await call(client, model, False, converter, tools))
        streamed = essentials(await call(client, model, True, converter, tools))
    assert streamed == plain
    assert plain["usage"]
    assert plain["tools"] if tools else plain["text"]


async def test_engine_fields_of_a_chat_completion(make_client: ClientFactory) -> None:
    """relaybatch.engine.kinds reads these exact attributes."""
    async with make_client() as client:
        completion = await client.chat_completions({"model": "relay-chat-small", "messages": _user("hi")})
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.model_dump()["total_tokens"] > 0
    assert completion.model == "relay-chat-small"


class HeaderRecorder(httpx.AsyncBaseTransport):
    """Passes every request to the emulator and keeps its headers."""

    def __init__(self, app: Starlette) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.headers: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        return await self.inner.handle_async_request(request)


async def test_each_family_sends_its_own_auth_headers(
    make_client: ClientFactory, emulator_app: Starlette
) -> None:
    recorder = HeaderRecorder(emulator_app)
    async with make_client(transport=recorder) as client:
        await _chat(client, "relay-chat-small", False, False, False)
        await _messages(client, "relay-claude-haiku", False, False, False)
        await _generate(client, "relay-gemini-flash", False, False, False)
    chat, messages, generate = recorder.headers
    assert chat["authorization"] == "Bearer rb-demo-key" and "x-api-key" not in chat
    assert messages["x-api-key"] == "rb-demo-key" and messages["anthropic-version"] == "2023-06-01"
    assert "authorization" not in messages
    assert generate["x-goog-api-key"] == "rb-demo-key" and "authorization" not in generate


async def test_streaming_flag_is_decided_by_the_method(make_client: ClientFactory) -> None:
    """A stray ``stream: true`` in a manifest request cannot turn a JSON answer into events."""
    async with make_client() as client:
        request = {"model": "relay-chat-small", "messages": _user("hi"), "stream": True}
        completion = await client.chat_completions(request)
    assert completion.choices[0].message.content
