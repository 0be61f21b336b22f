"""The responses format: request reading, the converter's refusals, the response body and its typed events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.codecs.sse import pieces, sse
from relaybatch.emulator.parsing import optional_int, optional_number, required_str, text_of
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.text.answer import Answer
from relaybatch.emulator.text.converters import FUNCTION_TOOL_TYPES
from relaybatch.emulator.text.synth import ChatRequest, ChatTurn, ToolSpec

STRUCTURED_FORMATS = {"json_schema", "json_object"}


def converter_refusal(body: dict[str, Any]) -> str | None:
    """Why the stateless responses converter refuses this request (None: it does not)."""
    if body.get("previous_response_id"):
        return "the responses converter is stateless: 'previous_response_id' is not supported"
    if body.get("store") is True:
        return "the responses converter does not store responses: 'store' must not be true"
    for index, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and tool.get("type") not in FUNCTION_TOOL_TYPES:
            kind = tool.get("type")
            return f"the responses converter does not support hosted tools ('tools[{index}]' is {kind!r})"
    if _format_type(body) in STRUCTURED_FORMATS:
        return "the responses converter does not support structured output formats ('text.format')"
    return None


def native_refusal(body: dict[str, Any]) -> str | None:
    if body.get("previous_response_id"):
        return "'previous_response_id' names no stored response (the emulator keeps none)"
    return None


def _format_type(body: dict[str, Any]) -> str | None:
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    return fmt.get("type") if isinstance(fmt, dict) else None


def _turns(body: dict[str, Any]) -> list[ChatTurn]:
    turns = []
    if isinstance(body.get("instructions"), str):
        turns.append(ChatTurn("system", body["instructions"]))
    items = body.get("input")
    if isinstance(items, str):
        return [*turns, ChatTurn("user", items)]
    if not isinstance(items, list) or not items:
        raise InvalidRequest("'input' is required: a string or a non-empty array of input items")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"'input[{index}]' must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidRequest(f"'input[{index}].role' must be user, assistant, system or developer")
            text = text_of(item.get("content"), f"input[{index}].content")
            turns.append(ChatTurn("system" if role == "developer" else role, text))
        elif kind == "function_call":
            turns.append(ChatTurn("assistant", f"{item.get('name')}({item.get('arguments')})"))
        elif kind == "function_call_output":
            turns.append(ChatTurn("tool", text_of(item.get("output"), f"input[{index}].output")))
        else:
            raise InvalidRequest(f"'input[{index}].type' {kind!r} is not a supported input item")
    return turns


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array")
    specs = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"'tools[{index}]' must be an object")
        if tool.get("type") != "function":
            continue  # hosted tools run upstream; the emulator's answer does not call them
        if not isinstance(tool.get("name"), str):
            raise InvalidRequest(f"'tools[{index}].name' is required")
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
        specs.append(ToolSpec(tool["name"], str(tool.get("description") or ""), parameters))
    return tuple(specs)


def parse(body: dict[str, Any], path_model: str | None = None) -> ChatRequest:
    model = required_str(body, "model")
    optional_number(body, "temperature", 0, 2)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = choice.get("name")
    schema = None
    if _format_type(body) == "json_schema":
        schema = body["text"]["format"].get("schema") or {"type": "object"}
    elif _format_type(body) == "json_object":
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    return ChatRequest(
        model,
        tuple(_turns(body)),
        _tools(body),
        choice if isinstance(choice, str) else None,
        optional_int(body, "max_output_tokens"),
        json_schema=schema,
    )


def usage(counts: TokenCounts) -> dict[str, Any]:
    prompt = counts.input + counts.cache_read + counts.input_image
    output = counts.output + counts.reasoning + counts.output_image
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": counts.cache_read},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": counts.reasoning},
        "total_tokens": prompt + output,
    }


def _output_items(answer: Answer) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if answer.counts.reasoning:
        items.append({"type": "reasoning", "id": answer.id("rs_"), "summary": []})
    for call in answer.reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": "fc_" + call.id.removeprefix("call_"),
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_json,
                "status": "completed",
            }
        )
    if not answer.reply.tool_calls:
        part = {"type": "output_text", "text": answer.reply.text, "annotations": []}
        message = {"type": "message", "id": answer.id("msg_"), "status": "completed", "role": "assistant"}
        items.append({**message, "content": [part]})
    return items


def render(answer: Answer, *, status: str | None = None) -> dict[str, Any]:
    incomplete = answer.reply.finish == "length"
    final = "incomplete" if incomplete else "completed"
    done = (status or final) != "in_progress"
    return {
        "id": answer.id("resp_"),
        "object": "response",
        "created_at": answer.created,
        "status": status or final,
        "model": answer.model,
        "output": _output_items(answer) if done else [],
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete and done else None,
        "error": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage(answer.counts) if done else None,
    }


def stream(answer: Answer, body: dict[str, Any]) -> Iterator[bytes]:
    """Typed events with a rising ``sequence_number``; no ``[DONE]``."""
    number = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal number
        frame = sse({"type": kind, "sequence_number": number, **fields}, event=kind)
        number += 1
        return frame

    yield event("response.created", response=render(answer, status="in_progress"))
    yield event("response.in_progress", response=render(answer, status="in_progress"))
    for index, item in enumerate(_output_items(answer)):
        if item["type"] == "message":
            yield from _message_events(event, index, item)
            continue
        started = {**item, "status": "in_progress"}
        if item["type"] == "function_call":
            started["arguments"] = ""
        yield event("response.output_item.added", output_index=index, item=started)
        if item["type"] == "function_call":
            args = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", **args, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **args, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    final = render(answer)
    yield event(f"response.{final['status']}", response=final)


def _message_events(event: Any, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield event(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    yield event(
        "response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": []}
    )
    for piece in pieces(text):
        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=item["content"][0])
    yield event("response.output_item.done", output_index=index, item=item)
