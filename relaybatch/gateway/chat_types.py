"""Chat completions: request and response models (openai family)."""

from __future__ import annotations

from typing import Any

from relaybatch.gateway.wire import WireModel


class ChatCompletionRequest(WireModel):
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    stream: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


class FunctionCall(WireModel):
    name: str = ""
    arguments: str = ""


class ToolCall(WireModel):
    id: str = ""
    type: str = "function"
    function: FunctionCall = FunctionCall()


class ChatMessage(WireModel):
    role: str = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(WireModel):
    index: int = 0
    message: ChatMessage = ChatMessage()
    finish_reason: str | None = None


class PromptTokensDetails(WireModel):
    cached_tokens: int = 0


class CompletionTokensDetails(WireModel):
    reasoning_tokens: int = 0


class Usage(WireModel):
    """``prompt_tokens`` includes cached tokens; ``completion_tokens`` includes reasoning tokens."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ChatCompletion(WireModel):
    id: str
    object: str = "chat.completion"
    created: int = 0
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
