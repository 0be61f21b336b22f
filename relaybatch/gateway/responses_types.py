"""Responses: request and response models (openai family)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class ResponsesRequest(WireModel):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    stream: bool | None = None
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None


class OutputContent(WireModel):
    type: str = "output_text"
    text: str = ""


class OutputItem(WireModel):
    """A ``message`` item (``content``) or a ``function_call`` item (``name``, ``arguments``)."""

    type: str = "message"
    id: str | None = None
    role: str | None = None
    content: list[OutputContent] | None = None
    name: str | None = None
    arguments: str | None = None
    call_id: str | None = None


class InputTokensDetails(WireModel):
    cached_tokens: int = 0


class OutputTokensDetails(WireModel):
    reasoning_tokens: int = 0


class ResponseUsage(WireModel):
    """``input_tokens`` includes cached tokens; ``output_tokens`` includes reasoning tokens."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails | None = None
    output_tokens_details: OutputTokensDetails | None = None


class Response(WireModel):
    id: str
    object: str = "response"
    model: str
    status: str | None = None
    output: list[OutputItem] = Field(default_factory=list)
    usage: ResponseUsage | None = None

    @property
    def output_text(self) -> str:
        """All ``output_text`` parts of all message items, in order."""
        return "".join(
            part.text
            for item in self.output
            if item.type == "message"
            for part in item.content or []
            if part.type == "output_text"
        )
