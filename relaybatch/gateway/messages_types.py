"""Messages: request and response models (anthropic family)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from relaybatch.gateway.wire import WireModel


class MessagesRequest(WireModel):
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system: str | list[dict[str, Any]] | None = None
    temperature: float | None = None
    stream: bool | None = None
    tools: list[dict[str, Any]] | None = None


class ContentBlock(WireModel):
    """A ``text`` block, a ``tool_use`` block (``id``, ``name``, ``input``) or a ``thinking`` block."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    thinking: str | None = None


class CacheCreation(WireModel):
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class MessagesUsage(WireModel):
    """``input_tokens`` excludes cache reads and writes, which are counted separately."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation: CacheCreation | None = None


class Message(WireModel):
    id: str
    type: str = "message"
    role: str = "assistant"
    content: list[ContentBlock] = Field(default_factory=list)
    model: str
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: MessagesUsage = MessagesUsage()

    @property
    def text(self) -> str:
        return "".join(block.text or "" for block in self.content if block.type == "text")
