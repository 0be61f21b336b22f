"""One server-sent-events reader, and per family an aggregator that rebuilds the full answer.

Each aggregator turns its family's events into the same model the non-streaming call returns
(text, tool calls, usage, finish reason), so callers never handle chunks. An ``error`` event, a
failed response, or a stream that ends before its family's end marker is an error, never a
silently short answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from relaybatch.gateway.chat_types import ChatCompletion
from relaybatch.gateway.errors import BrokenResponse, StreamError
from relaybatch.gateway.generate_content_types import GenerateContentResponse
from relaybatch.gateway.messages_types import Message
from relaybatch.gateway.responses_types import Response

ResultT = TypeVar("ResultT", bound=BaseModel, covariant=True)


@dataclass(frozen=True)
class ServerSentEvent:
    event: str | None
    data: str


async def read_events(lines: AsyncIterator[str]) -> AsyncIterator[ServerSentEvent]:
    """Events from SSE lines: ``event:`` and ``data:`` fields, comments skipped, blank line ends one."""
    event: str | None = None
    data: list[str] = []
    async for line in lines:
        if not line:
            if data or event:
                yield ServerSentEvent(event, "\n".join(data))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield ServerSentEvent(event, "\n".join(data))


class Aggregator(Protocol[ResultT]):
    def feed(self, event: ServerSentEvent) -> None: ...

    def result(self) -> ResultT: ...


def _json(event: ServerSentEvent) -> dict[str, Any]:
    try:
        payload = json.loads(event.data)
    except ValueError as exc:
        raise BrokenResponse(f"stream event is not JSON: {event.data[:80]!r}") from exc
    if not isinstance(payload, dict):
        raise BrokenResponse(f"stream event is not a JSON object: {event.data[:80]!r}")
    return payload


def _raise_error_payload(payload: dict[str, Any]) -> None:
    """An error object inside a stream (any family's envelope) becomes a StreamError."""
    error = payload.get("error")
    if isinstance(error, dict):
        kind = error.get("type") or error.get("status")
        raise StreamError(200, str(kind) if kind else None, str(error.get("message", "")), {}, payload)


class ChatCompletionAggregator:
    """``data: {chunk}`` frames with ``choices[].delta``, an optional usage chunk, then ``[DONE]``."""

    def __init__(self) -> None:
        self._head: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] | None = None
        self._done = False

    def feed(self, event: ServerSentEvent) -> None:
        if event.data.strip() == "[DONE]":
            self._done = True
            return
        chunk = _json(event)
        _raise_error_payload(chunk)
        for key in ("id", "model", "created", "system_fingerprint"):
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            self._add_delta(choice)

    def _add_delta(self, choice: dict[str, Any]) -> None:
        state = self._choices.setdefault(
            choice.get("index", 0), {"role": "assistant", "content": None, "tools": {}, "finish": None}
        )
        delta = choice.get("delta") or {}
        if delta.get("role"):
            state["role"] = delta["role"]
        if delta.get("content"):
            state["content"] = (state["content"] or "") + delta["content"]
        for call in delta.get("tool_calls") or []:
            slot = state["tools"].setdefault(
                call.get("index", 0),
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            slot["id"] = call.get("id") or slot["id"]
            function = call.get("function") or {}
            slot["function"]["name"] += function.get("name") or ""
            slot["function"]["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            state["finish"] = choice["finish_reason"]

    def result(self) -> ChatCompletion:
        if not self._done:
            raise BrokenResponse("chat stream ended before [DONE]")
        choices = []
        for index, state in sorted(self._choices.items()):
            message: dict[str, Any] = {"role": state["role"], "content": state["content"]}
            if state["tools"]:
                message["tool_calls"] = [call for _, call in sorted(state["tools"].items())]
            choices.append({"index": index, "message": message, "finish_reason": state["finish"]})
        body = {**self._head, "object": "chat.completion", "choices": choices, "usage": self._usage}
        return ChatCompletion.model_validate(body)


class ResponsesAggregator:
    """Typed ``response.*`` events; ``response.completed`` (or ``.incomplete``) carries the answer."""

    def __init__(self) -> None:
        self._final: dict[str, Any] | None = None
        self._text: dict[int, str] = {}
        self._items: dict[int, dict[str, Any]] = {}

    def feed(self, event: ServerSentEvent) -> None:
        payload = _json(event)
        kind = payload.get("type") or event.event
        if kind == "error":
            _raise_error_payload(payload)
            raise StreamError(200, None, str(payload.get("message", "error event")), {}, payload)
        if kind == "response.failed":
            response = payload.get("response") or {}
            error = response.get("error") or {}
            raise StreamError(200, "api_error", str(error.get("message", "response failed")), {}, payload)
        if kind in ("response.completed", "response.incomplete"):
            self._final = payload.get("response") or {}
        elif kind == "response.output_text.delta":
            index = payload.get("output_index", 0)
            self._text[index] = self._text.get(index, "") + str(payload.get("delta", ""))
        elif kind == "response.output_item.done":
            self._items[payload.get("output_index", 0)] = payload.get("item") or {}

    def result(self) -> Response:
        if self._final is None:
            raise BrokenResponse("responses stream ended before response.completed")
        final = dict(self._final)
        if not final.get("output"):
            # Some servers send the final event without the items already streamed; rebuild them.
            final["output"] = [self._item(index) for index in sorted(self._items.keys() | self._text.keys())]
        return Response.model_validate(final)

    def _item(self, index: int) -> dict[str, Any]:
        if index in self._items:
            return self._items[index]
        part = {"type": "output_text", "text": self._text[index]}
        return {"type": "message", "role": "assistant", "content": [part]}


class MessagesAggregator:
    """``message_start``, content block start / delta / stop, ``message_delta``, ``message_stop``."""

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json_parts: dict[int, str] = {}
        self._stopped = False

    def feed(self, event: ServerSentEvent) -> None:
        payload = _json(event)
        kind = payload.get("type") or event.event
        if kind == "error":
            _raise_error_payload(payload)
            raise StreamError(200, None, "error event without details", {}, payload)
        if kind == "message_start":
            self._message = dict(payload.get("message") or {})
        elif kind == "content_block_start":
            self._blocks[payload.get("index", 0)] = dict(payload.get("content_block") or {})
        elif kind == "content_block_delta":
            self._add_delta(payload.get("index", 0), payload.get("delta") or {})
        elif kind == "content_block_stop":
            self._finish_block(payload.get("index", 0))
        elif kind == "message_delta":
            self._apply_message_delta(payload)
        elif kind == "message_stop":
            self._stopped = True

    def _add_delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = (block.get("text") or "") + delta.get("text", "")
        elif kind == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + delta.get("thinking", "")
        elif kind == "input_json_delta":
            self._json_parts[index] = self._json_parts.get(index, "") + delta.get("partial_json", "")

    def _finish_block(self, index: int) -> None:
        if index in self._json_parts:
            text = self._json_parts.pop(index)
            try:
                self._blocks[index]["input"] = json.loads(text) if text else {}
            except ValueError as exc:
                raise BrokenResponse(f"tool input in block {index} is not JSON") from exc

    def _apply_message_delta(self, payload: dict[str, Any]) -> None:
        if self._message is None:
            raise BrokenResponse("message_delta before message_start")
        self._message.update({k: v for k, v in (payload.get("delta") or {}).items() if v is not None})
        # message_delta usage counts are cumulative: they replace, never add to, the start's counts.
        usage = dict(self._message.get("usage") or {})
        usage.update({k: v for k, v in (payload.get("usage") or {}).items() if v is not None})
        self._message["usage"] = usage

    def result(self) -> Message:
        if self._message is None or not self._stopped:
            raise BrokenResponse("messages stream ended before message_stop")
        content = [block for _, block in sorted(self._blocks.items())]
        return Message.model_validate({**self._message, "content": content})


class GenerateContentAggregator:
    """``data: {GenerateContentResponse}`` frames; parts append, the last frame holds usage and finish."""

    def __init__(self) -> None:
        self._head: dict[str, Any] = {}
        self._candidates: dict[int, dict[str, Any]] = {}
        self._finished = False

    def feed(self, event: ServerSentEvent) -> None:
        frame = _json(event)
        _raise_error_payload(frame)
        for key in ("usageMetadata", "modelVersion", "responseId", "promptFeedback"):
            if frame.get(key) is not None:
                self._head[key] = frame[key]
        for position, candidate in enumerate(frame.get("candidates") or []):
            self._add_candidate(candidate.get("index", position), candidate)

    def _add_candidate(self, index: int, candidate: dict[str, Any]) -> None:
        state = self._candidates.setdefault(
            index, {"index": index, "content": {"role": "model", "parts": []}}
        )
        content = candidate.get("content") or {}
        if content.get("role"):
            state["content"]["role"] = content["role"]
        parts: list[dict[str, Any]] = state["content"]["parts"]
        for part in content.get("parts") or []:
            previous = parts[-1] if parts else None
            if (
                previous is not None
                and "text" in part
                and set(previous) <= {"text", "thought"}
                and set(part) <= {"text", "thought"}
                and previous.get("thought") == part.get("thought")
            ):
                previous["text"] += part["text"]  # a text part split over frames is one part
            else:
                parts.append(dict(part))
        if candidate.get("finishReason"):
            state["finishReason"] = candidate["finishReason"]
            self._finished = True

    def result(self) -> GenerateContentResponse:
        blocked = (self._head.get("promptFeedback") or {}).get("blockReason")
        if not self._finished and not blocked:
            raise BrokenResponse("generate-content stream ended without a finishReason")
        candidates = [state for _, state in sorted(self._candidates.items())]
        return GenerateContentResponse.model_validate({**self._head, "candidates": candidates})
