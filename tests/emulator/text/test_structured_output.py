"""Structured output: each family's way of asking for JSON, through its official SDK and over raw
HTTP, answered with a document that fits the schema; the invalid_json fault breaks a share; a
prompt that asks for N words gets about that many."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import jsonschema
from emulator_http import anthropic, bearer, user_chat, user_messages
from google.genai import types as genai_types
from pydantic import BaseModel
from starlette.applications import Starlette

from relaybatch.emulator import EmulatorState
from relaybatch.emulator.config import FaultRule, FaultsConfig
from relaybatch.emulator.text.structured import asked_words
from tests.emulator.test_sdks import anthropic_client, genai_client, openai_client

LABEL = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "sarcastic": {"type": "boolean"},
    },
    "required": ["sentiment", "confidence", "sarcastic"],
    "additionalProperties": False,
}
GEMINI_LABEL = {
    "type": "OBJECT",
    "properties": {
        "sentiment": {"type": "STRING", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "NUMBER"},
        "sarcastic": {"type": "BOOLEAN"},
    },
    "required": ["sentiment", "confidence", "sarcastic"],
}


def _valid(document: Any) -> bool:
    return jsonschema.Draft202012Validator(LABEL).is_valid(document)


async def test_openai_chat_response_format(app: Starlette) -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "label", "schema": LABEL, "strict": True},
    }
    async with openai_client(app) as client:
        completion = await client.chat.completions.create(
            model="relay-chat-small",
            messages=[{"role": "user", "content": "label: great film"}],
            response_format=response_format,  # type: ignore[arg-type]
        )

    assert _valid(json.loads(completion.choices[0].message.content or ""))


async def test_openai_chat_forced_function_tool(app: Starlette) -> None:
    tool = {"type": "function", "function": {"name": "label", "parameters": LABEL}}
    async with openai_client(app) as client:
        completion = await client.chat.completions.create(
            model="relay-chat-small",
            messages=[{"role": "user", "content": "label: great film"}],
            tools=[tool],  # type: ignore[list-item]
            tool_choice={"type": "function", "function": {"name": "label"}},
        )

    [call] = completion.choices[0].message.tool_calls or []
    assert call.function.name == "label"  # type: ignore[union-attr]
    assert _valid(json.loads(call.function.arguments))  # type: ignore[union-attr]


async def test_openai_responses_text_format(app: Starlette) -> None:
    async with openai_client(app) as client:
        response = await client.responses.create(
            model="relay-chat-small",
            input="label: great film",
            text={"format": {"type": "json_schema", "name": "label", "schema": LABEL, "strict": True}},
        )

    assert _valid(json.loads(response.output_text))


async def test_anthropic_messages_forced_tool(app: Starlette) -> None:
    async with anthropic_client(app) as client:
        message = await client.messages.create(
            model="relay-claude-haiku",
            max_tokens=256,
            messages=[{"role": "user", "content": "label: great film"}],
            tools=[{"name": "label", "description": "the label", "input_schema": LABEL}],
            tool_choice={"type": "tool", "name": "label"},
        )

    [block] = message.content
    assert block.type == "tool_use"
    assert _valid(block.input)


async def test_genai_response_schema(app: Starlette) -> None:
    client, http_client = genai_client(app)
    config = genai_types.GenerateContentConfig(
        response_mime_type="application/json", response_schema=GEMINI_LABEL
    )
    async with http_client:
        response = await client.aio.models.generate_content(
            model="relay-gemini-flash", contents="label: great film", config=config
        )

    assert _valid(json.loads(response.text or ""))


async def test_answers_spread_over_the_enum(http: httpx.AsyncClient) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "label", "schema": LABEL}}
    seen = set()
    for number in range(30):
        request = user_chat(text=f"row {number}", response_format=response_format)
        body = (await http.post("/v1/chat/completions", json=request, headers=bearer())).json()
        seen.add(json.loads(body["choices"][0]["message"]["content"])["sentiment"])

    assert seen == {"positive", "negative", "neutral"}


async def test_invalid_json_fault_breaks_text_and_tool_answers(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    fault = {"x-emulator-fault": "invalid_json"}
    response_format = {"type": "json_schema", "json_schema": {"name": "label", "schema": LABEL}}
    chat = await http.post(
        "/v1/chat/completions", json=user_chat(response_format=response_format), headers={**bearer(), **fault}
    )
    tools = [{"name": "label", "input_schema": LABEL}]
    messages = await http.post(
        "/v1/messages",
        json=user_messages(tools=tools, tool_choice={"type": "tool", "name": "label"}),
        headers={**anthropic(), **fault},
    )

    text = chat.json()["choices"][0]["message"]["content"]
    assert not text.startswith("{")
    assert not _valid(messages.json()["content"][0]["input"])
    assert [charge.usage.get("fault") for charge in state.ledger] == ["invalid_json", "invalid_json"]
    assert all(charge.usd > 0 for charge in state.ledger)  # broken answers are billed like any


async def test_invalid_json_rule_hits_a_share(http: httpx.AsyncClient, state: EmulatorState) -> None:
    state.faults.replace(FaultsConfig(seed=7, rules=[FaultRule(fault="invalid_json", rate=0.1)]))
    response_format = {"type": "json_schema", "json_schema": {"name": "label", "schema": LABEL}}
    broken = 0
    for number in range(200):
        request = user_chat(text=f"row {number}", response_format=response_format)
        body = (await http.post("/v1/chat/completions", json=request, headers=bearer())).json()
        broken += not body["choices"][0]["message"]["content"].startswith("{")

    assert 8 <= broken <= 35
    assert broken == sum(charge.usage.get("fault") == "invalid_json" for charge in state.ledger)


async def test_plain_answers_ignore_the_invalid_json_fault(
    http: httpx.AsyncClient, state: EmulatorState
) -> None:
    body = (
        await http.post(
            "/v1/chat/completions", json=user_chat(), headers={**bearer(), "x-emulator-fault": "invalid_json"}
        )
    ).json()

    assert body["choices"][0]["message"]["content"].startswith("Emulated answer")
    assert "fault" not in state.ledger[0].usage


async def test_long_answers_have_the_length_asked(http: httpx.AsyncClient) -> None:
    lengths = []
    for number in range(5):
        request = user_chat(text=f"Write a 500-word essay on topic {number}.", max_tokens=4000)
        body = (await http.post("/v1/chat/completions", json=request, headers=bearer())).json()
        lengths.append(len(body["choices"][0]["message"]["content"].split()))
        assert body["choices"][0]["finish_reason"] == "stop"

    assert all(400 <= words <= 600 for words in lengths)
    assert len(set(lengths)) > 1


async def test_long_answers_stop_at_the_cap(http: httpx.AsyncClient) -> None:
    request = user_chat(text="Write 2000 words.", max_tokens=100)
    body = (await http.post("/v1/chat/completions", json=request, headers=bearer())).json()

    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 100


def test_asked_words() -> None:
    assert asked_words("a 300-word essay") == 300
    assert asked_words("in about 800 tokens") == 400
    assert asked_words("say hi") is None


class Label(BaseModel):
    sentiment: Literal["positive", "negative", "neutral"]
    confidence: float
    sarcastic: bool


async def test_openai_parse_reads_the_answer_into_a_pydantic_model(app: Starlette) -> None:
    async with openai_client(app) as client:
        completion = await client.chat.completions.parse(
            model="relay-chat-small",
            messages=[{"role": "user", "content": "label: great film"}],
            response_format=Label,
        )
        response = await client.responses.parse(
            model="relay-chat-small", input="label: great film", text_format=Label
        )

    assert isinstance(completion.choices[0].message.parsed, Label)
    assert isinstance(response.output_parsed, Label)


async def test_genai_parses_the_answer_into_a_pydantic_model(app: Starlette) -> None:
    client, http_client = genai_client(app)
    config = genai_types.GenerateContentConfig(response_mime_type="application/json", response_schema=Label)
    async with http_client:
        response = await client.aio.models.generate_content(
            model="relay-gemini-flash", contents="label: great film", config=config
        )

    assert isinstance(response.parsed, Label)


async def test_anthropic_parse_reads_the_answer_into_a_pydantic_model(app: Starlette) -> None:
    async with anthropic_client(app) as client:
        message = await client.messages.parse(
            model="relay-claude-haiku",
            max_tokens=256,
            messages=[{"role": "user", "content": "label: great film"}],
            output_format=Label,
        )

    assert isinstance(message.parsed_output, Label)
