"""Streaming in each family's own event format, with usage (public-facts.md, "Streaming shapes")."""

from __future__ import annotations

import json

import httpx
from emulator_http import (
    anthropic,
    bearer,
    goog,
    sse_data,
    sse_events,
    user_chat,
    user_contents,
    user_messages,
    user_responses,
)


async def test_chat_stream_chunks_usage_and_done(http: httpx.AsyncClient) -> None:
    request = user_chat(stream=True, stream_options={"include_usage": True})
    plain = (await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())).json()

    response = await http.post("/v1/chat/completions", json=request, headers=bearer())

    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_data(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == plain["usage"]


async def test_chat_stream_without_include_usage_has_no_usage_chunk(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/chat/completions", json=user_chat(stream=True), headers=bearer())

    chunks = sse_data(response.text)[:-1]
    assert all(chunk["choices"] for chunk in chunks)
    assert not any("usage" in chunk for chunk in chunks)


async def test_chat_stream_tool_calls(http: httpx.AsyncClient) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

    response = await http.post(
        "/v1/chat/completions", json=user_chat(stream=True, tools=tools), headers=bearer()
    )

    chunks = sse_data(response.text)[:-1]
    calls = [
        c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0][0]["function"]["name"] == "lookup"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_responses_stream_typed_events_with_sequence_numbers(http: httpx.AsyncClient) -> None:
    plain = (
        await http.post("/v1/responses", json=user_responses("relay-chat-reasoner"), headers=bearer())
    ).json()

    response = await http.post(
        "/v1/responses", json=user_responses("relay-chat-reasoner", stream=True), headers=bearer()
    )

    events = sse_data(response.text)
    assert "[DONE]" not in events
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert sse_events(response.text) == [event["type"] for event in events]
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == plain["output"][-1]["content"][0]["text"]
    assert events[-1]["response"]["usage"] == plain["usage"]
    assert events[-1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


async def test_responses_stream_ends_incomplete_at_the_output_limit(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/responses", json=user_responses(stream=True, max_output_tokens=2), headers=bearer()
    )

    assert sse_data(response.text)[-1]["type"] == "response.incomplete"


async def test_messages_stream_named_events_with_ping_and_cumulative_usage(http: httpx.AsyncClient) -> None:
    plain = (await http.post("/v1/messages", json=user_messages(), headers=anthropic())).json()

    response = await http.post("/v1/messages", json=user_messages(stream=True), headers=anthropic())

    names = sse_events(response.text)
    assert names[:2] == ["message_start", "ping"]
    assert names[2] == "content_block_start"
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    payloads = sse_data(response.text)
    assert "[DONE]" not in payloads
    text = "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert text == plain["content"][0]["text"]
    message_delta = next(p for p in payloads if p["type"] == "message_delta")
    assert message_delta["delta"]["stop_reason"] == "end_turn"
    assert message_delta["usage"] == plain["usage"]


async def test_messages_stream_tool_use_sends_input_json(http: httpx.AsyncClient) -> None:
    tools = [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]

    response = await http.post(
        "/v1/messages", json=user_messages(stream=True, tools=tools), headers=anthropic()
    )

    payloads = sse_data(response.text)
    delta = next(p["delta"] for p in payloads if p["type"] == "content_block_delta")
    assert delta["type"] == "input_json_delta"
    assert json.loads(delta["partial_json"]) == {"q": "example q"}


async def test_generate_content_sse_frames_with_usage_in_the_last(http: httpx.AsyncClient) -> None:
    path = "/v1beta/models/relay-gemini-pro"
    plain = (await http.post(f"{path}:generateContent", json=user_contents(), headers=goog())).json()

    response = await http.post(f"{path}:streamGenerateContent?alt=sse", json=user_contents(), headers=goog())

    frames = sse_data(response.text)
    assert len(frames) > 1
    assert all("usageMetadata" not in frame for frame in frames[:-1])
    assert frames[-1]["usageMetadata"] == plain["usageMetadata"]
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"
    text = "".join(f["candidates"][0]["content"]["parts"][0]["text"] for f in frames)
    assert text == plain["candidates"][0]["content"]["parts"][0]["text"]


async def test_generate_content_stream_without_alt_sse_is_one_json_array(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1beta/models/relay-gemini-flash:streamGenerateContent", json=user_contents(), headers=goog()
    )

    frames = json.loads(response.text)
    assert isinstance(frames, list)
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "usageMetadata" in frames[-1]


async def test_a_stream_is_billed_like_the_plain_call(http: httpx.AsyncClient) -> None:
    await http.post("/v1/chat/completions", json=user_chat(), headers=bearer())
    await http.post("/v1/chat/completions", json=user_chat(stream=True), headers=bearer())

    ledger = (await http.get("/_emulator/ledger")).json()["charges"]
    assert ledger[0]["usd"] == ledger[1]["usd"]
