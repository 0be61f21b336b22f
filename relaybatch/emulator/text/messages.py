"""The messages format: request reading, the message body and its named stream events."""

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

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = []
    for index, tool in enumerate(object_list(body, "tools", required=False)):
        if not isinstance(tool.get("name"), str):
            raise InvalidRequest(f"'tools[{index}].name' is required")
        schema = tool.get("input_schema") or {"type": "object", "properties": {}}
        tools.append(ToolSpec(tool["name"], str(tool.get("description") or ""), schema))
    return tuple(tools)


def _tool_choice(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("auto", "any", "tool", "none"):
        raise InvalidRequest("'tool_choice' must be {type: auto | any | tool | none}")
    return {"auto": "auto", "any": "required", "none": "none"}.get(value["type"]) or str(value.get("name"))


def parse(body: dict[str, Any], path_model: str | None = None) -> ChatRequest:
    model = required_str(body, "model")
    if body.get("max_tokens") is None:
        raise InvalidRequest("'max_tokens' is required")
    limit = optional_int(body, "max_tokens")
    optional_number(body, "temperature", 0, 1)
    turns = []
    if body.get("system") is not None:
        turns.append(ChatTurn("system", text_of(body["system"], "system")))
    for index, message in enumerate(object_list(body, "messages", required=True)):
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"'messages[{index}].role' must be user or assistant")
        content = message.get("content")
        text = text_of(content, f"messages[{index}].content")
        is_tool_result = isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        )
        turns.append(ChatTurn("tool" if is_tool_result else role, text))
    return ChatRequest(
        model,
        tuple(turns),
        _tools(body),
        _tool_choice(body.get("tool_choice")),
        limit,
        json_schema=_output_schema(body.get("output_config")),
    )


def _output_schema(config: Any) -> dict[str, Any] | None:
    """``output_config.format {type: json_schema, schema}`` (the family's structured outputs, which
    its SDK's ``messages.parse`` sends): the answer text is JSON fitting the schema."""
    fmt = config.get("format") if isinstance(config, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    schema = fmt.get("schema")
    return schema if isinstance(schema, dict) else {"type": "object"}


def usage(counts: TokenCounts) -> dict[str, Any]:
    """Input excludes cache tokens; cache_creation_input_tokens = 5-minute + 1-hour writes."""
    return {
        "input_tokens": counts.input + counts.input_image,
        "cache_read_input_tokens": counts.cache_read,
        "cache_creation_input_tokens": counts.cache_write + counts.cache_write_1h,
        "cache_creation": {
            "ephemeral_5m_input_tokens": counts.cache_write,
            "ephemeral_1h_input_tokens": counts.cache_write_1h,
        },
        "output_tokens": counts.output + counts.reasoning + counts.output_image,
    }


def _blocks(answer: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if answer.reply.text or not answer.reply.tool_calls:
        blocks.append({"type": "text", "text": answer.reply.text})
    for call in answer.reply.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": "toolu_" + call.id.removeprefix("call_"),
                "name": call.name,
                "input": call.arguments,
            }
        )
    return blocks


def _stop_reason(answer: Answer) -> str:
    return STOP_REASONS.get(answer.reply.finish, "refusal")


def render(answer: Answer) -> dict[str, Any]:
    return {
        "id": answer.id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": _blocks(answer),
        "stop_reason": _stop_reason(answer),
        "stop_sequence": None,
        "usage": usage(answer.counts),
    }


def stream(answer: Answer, body: dict[str, Any]) -> Iterator[bytes]:
    """message_start, ping, content blocks, message_delta (cumulative usage), message_stop."""

    def event(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, **fields}, event=kind)

    start_usage = {**usage(answer.counts), "output_tokens": 1}
    message = {**render(answer), "content": [], "stop_reason": None, "usage": start_usage}
    yield event("message_start", message=message)
    yield event("ping")
    for index, block in enumerate(_blocks(answer)):
        if block["type"] == "text":
            yield event("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in pieces(block["text"]):
                yield event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        else:
            yield event("content_block_start", index=index, content_block={**block, "input": {}})
            partial = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], sort_keys=True)}
            yield event("content_block_delta", index=index, delta=partial)
        yield event("content_block_stop", index=index)
    delta = {"stop_reason": _stop_reason(answer), "stop_sequence": None}
    yield event("message_delta", delta=delta, usage=usage(answer.counts))
    yield event("message_stop")
