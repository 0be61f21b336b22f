"""The four text formats: native routes, converter routes, determinism, tools, output limits."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_http import anthropic, bearer, goog, user_chat, user_contents, user_messages, user_responses

WEATHER_TOOL = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


async def test_chat_completion_shape(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()

    assert body["object"] == "chat.completion"
    assert body["model"] == "relay-chat-small"
    assert isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"].startswith("Emulated answer from relay-chat-small")
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_responses_shape(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/responses", json=user_responses(), headers=bearer())).json()

    assert body["object"] == "response"
    [item] = body["output"]
    assert item["type"] == "message"
    assert item["role"] == "assistant"
    assert item["content"][0]["type"] == "output_text"
    assert item["content"][0]["text"].startswith("Emulated answer")
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]


async def test_messages_shape(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/messages", json=user_messages(), headers=anthropic())).json()

    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["content"][0]["type"] == "text"
    assert body["stop_reason"] == "end_turn"
    assert set(body["usage"]) >= {"input_tokens", "output_tokens"}


async def test_generate_content_shape(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json=user_contents(), headers=goog()
    )

    body = response.json()
    [candidate] = body["candidates"]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["role"] == "model"
    assert "text" in candidate["content"]["parts"][0]
    usage = body["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]


async def test_same_request_same_answer(http: httpx.AsyncClient) -> None:
    first = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()
    second = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()
    other = (await http.post("/v1/chat/completions", json=user_chat(text="bye"), headers=bearer())).json()

    assert first["choices"] == second["choices"]
    assert first["id"] == second["id"]
    assert first["choices"][0]["message"]["content"] != other["choices"][0]["message"]["content"]


async def test_usage_grows_with_input_and_output(http: httpx.AsyncClient) -> None:
    short = (await http.post("/v1/chat/completions", json=user_chat(text="hi"), headers=bearer())).json()
    long = (
        await http.post("/v1/chat/completions", json=user_chat(text="hi " * 400), headers=bearer())
    ).json()

    assert long["usage"]["prompt_tokens"] > short["usage"]["prompt_tokens"] + 250
    text = short["choices"][0]["message"]["content"]
    assert short["usage"]["completion_tokens"] == -(-len(text) // 4)


# ---- native routes accept only their own family -------------------------------------------------
NATIVE_MISMATCH = [
    ("/v1/chat/completions", user_chat("relay-claude-haiku"), bearer()),
    ("/v1/responses", user_responses("relay-gemini-flash"), bearer()),
    ("/v1/messages", user_messages("relay-chat-small"), anthropic()),
    ("/v1beta/models/relay-chat-small:generateContent", user_contents(), goog()),
]


@pytest.mark.parametrize(
    ("path", "body", "headers"), NATIVE_MISMATCH, ids=[row[0] for row in NATIVE_MISMATCH]
)
async def test_native_routes_refuse_other_families(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    response = await http.post(path, json=body, headers=headers)

    assert response.status_code == 400
    error = response.json()["error"]
    if path.startswith("/v1beta/"):
        assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    else:
        assert error["type"] == "invalid_request_error"
    assert "converter" in error["message"]


# ---- converters answer other families in the caller's format ------------------------------------
async def test_chat_converter_answers_a_messages_model_as_a_chat_completion(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/openai/v1/chat/completions", json=user_chat("relay-claude-haiku"), headers=bearer()
    )

    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "relay-claude-haiku"
    assert body["choices"][0]["message"]["content"].startswith("Emulated answer from relay-claude-haiku")


async def test_responses_converter_answers_a_gemini_model(http: httpx.AsyncClient) -> None:
    body = (
        await http.post("/openai/v1/responses", json=user_responses("relay-gemini-flash"), headers=bearer())
    ).json()

    assert body["object"] == "response"
    assert body["output"][0]["content"][0]["type"] == "output_text"


async def test_messages_converter_answers_an_openai_model(http: httpx.AsyncClient) -> None:
    body = (
        await http.post("/anthropic/v1/messages", json=user_messages("relay-chat-small"), headers=anthropic())
    ).json()

    assert body["type"] == "message"
    assert body["model"] == "relay-chat-small"


async def test_generate_content_converter_answers_a_messages_model(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/gemini/v1beta/models/relay-claude-haiku:generateContent", json=user_contents(), headers=goog()
    )

    assert response.json()["candidates"][0]["finishReason"] == "STOP"


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"tools": [{"type": "web_search"}]}, "hosted tools"),
        ({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "structured"),
        ({"text": {"format": {"type": "json_object"}}}, "structured"),
    ],
)
async def test_responses_converter_refusals(
    http: httpx.AsyncClient, extra: dict[str, Any], word: str
) -> None:
    response = await http.post("/openai/v1/responses", json={**user_responses(), **extra}, headers=bearer())

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert word in response.json()["error"]["message"]


async def test_native_responses_takes_structured_output(http: httpx.AsyncClient) -> None:
    schema = {"type": "object", "properties": {"label": {"type": "string", "enum": ["spam", "ham"]}}}
    text_format = {"format": {"type": "json_schema", "name": "label", "schema": schema}}

    request = {**user_responses(), "text": text_format}

    body = (await http.post("/v1/responses", json=request, headers=bearer())).json()

    assert body["output"][0]["content"][0]["text"] == '{"label": "spam"}'


# ---- tools -------------------------------------------------------------------------------------
async def test_chat_tools_give_tool_calls(http: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "weather", "parameters": WEATHER_TOOL}}]

    body = (await http.post("/v1/chat/completions", json=user_chat(tools=tools), headers=bearer())).json()

    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "weather"
    assert call["function"]["arguments"] == '{"city": "example city", "days": 1}'


async def test_chat_answers_after_the_tool_result(http: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "weather", "parameters": WEATHER_TOOL}}]
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    request = {"model": "relay-chat-small", "messages": messages, "tools": tools}

    body = (await http.post("/v1/chat/completions", json=request, headers=bearer())).json()

    assert body["choices"][0]["finish_reason"] == "stop"


async def test_responses_tools_give_function_calls(http: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER_TOOL}]

    body = (await http.post("/v1/responses", json=user_responses(tools=tools), headers=bearer())).json()

    [call] = [item for item in body["output"] if item["type"] == "function_call"]
    assert call["name"] == "weather"
    assert call["arguments"] == '{"city": "example city", "days": 1}'


async def test_messages_tools_give_tool_use(http: httpx.AsyncClient) -> None:
    tools = [{"name": "weather", "input_schema": WEATHER_TOOL}]

    body = (await http.post("/v1/messages", json=user_messages(tools=tools), headers=anthropic())).json()

    assert body["stop_reason"] == "tool_use"
    [block] = [b for b in body["content"] if b["type"] == "tool_use"]
    assert block["input"] == {"city": "example city", "days": 1}


async def test_generate_content_tools_give_function_calls(http: httpx.AsyncClient) -> None:
    declaration = {
        "name": "weather",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
    }
    request = user_contents(tools=[{"functionDeclarations": [declaration]}])

    body = (
        await http.post("/v1beta/models/relay-gemini-flash:generateContent", json=request, headers=goog())
    ).json()

    part = body["candidates"][0]["content"]["parts"][0]
    assert part == {"functionCall": {"name": "weather", "args": {"city": "example city"}}}


# ---- output limits -----------------------------------------------------------------------------
async def test_output_limit_cuts_the_answer_in_every_format(http: httpx.AsyncClient) -> None:
    chat = await http.post("/v1/chat/completions", json=user_chat(max_tokens=3), headers=bearer())
    messages = await http.post("/v1/messages", json={**user_messages(), "max_tokens": 3}, headers=anthropic())
    responses = await http.post("/v1/responses", json=user_responses(max_output_tokens=3), headers=bearer())
    gemini = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent",
        json=user_contents(generationConfig={"maxOutputTokens": 3}),
        headers=goog(),
    )

    assert chat.json()["choices"][0]["finish_reason"] == "length"
    assert chat.json()["usage"]["completion_tokens"] == 3
    assert messages.json()["stop_reason"] == "max_tokens"
    assert responses.json()["status"] == "incomplete"
    assert gemini.json()["candidates"][0]["finishReason"] == "MAX_TOKENS"


# ---- malformed requests ------------------------------------------------------------------------
MALFORMED = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, bearer(), "'model'"),
    ("/v1/chat/completions", {"model": "relay-chat-small"}, bearer(), "'messages'"),
    ("/v1/chat/completions", user_chat(temperature=3), bearer(), "'temperature'"),
    ("/v1/chat/completions", user_chat("no-such-model"), bearer(), "unknown model"),
    ("/v1/chat/completions", user_chat("relay-chat-internal"), bearer(), "unknown model"),
    ("/v1/chat/completions", user_chat("relay-image-2"), bearer(), "not a chat model"),
    ("/v1/responses", {"model": "relay-chat-small"}, bearer(), "'input'"),
    (
        "/v1/messages",
        {"model": "relay-claude-haiku", "messages": [{"role": "user", "content": "x"}]},
        anthropic(),
        "max_tokens",
    ),
    ("/v1/messages", user_messages(temperature=1.5), anthropic(), "'temperature'"),
]


@pytest.mark.parametrize(("path", "body", "headers", "words"), MALFORMED)
async def test_malformed_requests_are_400(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str], words: str
) -> None:
    response = await http.post(path, json=body, headers=headers)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert words in response.json()["error"]["message"]


async def test_not_json_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/chat/completions", content=b"{nope", headers=bearer())

    assert response.status_code == 400


@pytest.mark.parametrize(
    ("contents", "words"),
    [
        ([], "'contents'"),
        ([{"role": "user", "parts": []}], "parts"),
        (
            [{"role": "user", "parts": [{"inlineData": {"mimeType": "video/x-nope", "data": "AAAA"}}]}],
            "mimeType",
        ),
        ([{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "***"}}]}], "base64"),
    ],
)
async def test_malformed_generate_content_is_invalid_argument(
    http: httpx.AsyncClient, contents: list[Any], words: str
) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:generateContent", json={"contents": contents}, headers=goog()
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert words in error["message"]


async def test_restricted_account_gets_403_for_other_models(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/chat/completions", json=user_chat("relay-chat-reasoner"), headers=bearer("rb-restricted-key")
    )

    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"


async def test_unknown_generate_content_action_is_404(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:countTokens", json=user_contents(), headers=goog()
    )

    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"
