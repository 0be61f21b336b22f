"""The chat-completions format: request reading, the chat.completion body and its SSE chunks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.codecs.sse import pieces, sse
from relaybatch.emulator.parsing import object_list, optional_int, optional_number, required_str, text_of
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.text.answer import Answer
from relaybatch.emulator.text.synth import ChatRequest, ChatTurn, ToolSpec

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = []
    for index, tool in enumerate(object_list(body, "tools", required=False)):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise InvalidRequest(
                f"'tools[{index}]' must be {{type: function, function: {{name, parameters}}}}"
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"'tools[{index}].function.name' is required")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise InvalidRequest(f"'tools[{index}].function.parameters' must be a JSON-schema object")
        tools.append(ToolSpec(name, str(function.get("description") or ""), parameters))
    return tuple(tools)


def _tool_choice(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        return str(value["function"].get("name"))
    raise InvalidRequest(
        "'tool_choice' must be 'auto', 'none', 'required' or {type: function, function: {name}}"
    )


def parse(body: dict[str, Any], path_model: str | None = None) -> ChatRequest:
    model = required_str(body, "model")
    turns = []
    for index, message in enumerate(object_list(body, "messages", required=True)):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            raise InvalidRequest(
                f"'messages[{index}].role' must be system, developer, user, assistant or tool"
            )
        text = text_of(message.get("content"), f"messages[{index}].content")
        if message.get("tool_calls"):
            text += json.dumps(message["tool_calls"], sort_keys=True)
        turns.append(ChatTurn("system" if role == "developer" else str(role), text))
    optional_number(body, "temperature", 0, 2)
    limit = optional_int(body, "max_completion_tokens") or optional_int(body, "max_tokens")
    return ChatRequest(
        model,
        tuple(turns),
        _tools(body),
        _tool_choice(body.get("tool_choice")),
        limit,
        json_schema=_response_schema(body.get("response_format")),
    )


def _response_schema(response_format: Any) -> dict[str, Any] | None:
    """``response_format``: json_schema gives its schema; json_object any object; text nothing."""
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return {"type": "object", "properties": {"answer": {"type": "string"}}}
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def usage(counts: TokenCounts) -> dict[str, Any]:
    prompt = counts.input + counts.cache_read + counts.input_image
    completion = counts.output + counts.reasoning + counts.output_image
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": counts.cache_read},
        "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
    }


def _tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json}}
        for call in answer.reply.tool_calls
    ]


def _finish(answer: Answer) -> str:
    return FINISH.get(answer.reply.finish, "content_filter")


def render(answer: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.reply.text or None}
    if answer.reply.tool_calls:
        message["tool_calls"] = _tool_calls(answer)
    return {
        "id": answer.id("chatcmpl-"),
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(answer), "logprobs": None}],
        "usage": usage(answer.counts),
    }


def stream(answer: Answer, body: dict[str, Any]) -> Iterator[bytes]:
    """chat.completion.chunk frames, the usage chunk when asked for, then ``[DONE]``."""
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    base = {"id": answer.id("chatcmpl-"), "object": "chat.completion.chunk", "created": answer.created}
    base["model"] = answer.model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    if answer.reply.tool_calls:
        for index, call in enumerate(_tool_calls(answer)):
            yield chunk({"tool_calls": [{"index": index, **call}]})
    else:
        for piece in pieces(answer.reply.text):
            yield chunk({"content": piece})
    yield chunk({}, _finish(answer))
    if include_usage:
        yield sse({**base, "choices": [], "usage": usage(answer.counts)})
    yield sse("[DONE]")
