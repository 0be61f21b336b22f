"""Deterministic synthetic answers: the same request always gets the same text, tool call and usage.

A request in any of the four text formats is first read into a ``ChatRequest``; ``synthesize``
answers it with a ``Reply`` whose ``TokenCounts`` follow the usage rules in docs/emulator.md:

- tokens = ceil(characters / 4) per text; each turn adds 3 tokens; tool definitions count as JSON text;
- a model with ``reasoning: true`` thinks 2 x its visible output + 8 tokens;
- a model with ``cache: true`` and a prompt of 1,024 tokens or more reads half of its prompt from
  the cache; an anthropic-family model also writes an eighth (5-minute) and a sixteenth (1-hour);
- the visible output is capped at the request's output-token limit (finish ``length``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.config import ModelConfig
from relaybatch.emulator.text.structured import (
    asked_words,
    broken_text,
    long_text,
    schema_value,
    violating_value,
)

TOKENS_PER_TURN = 3
CACHE_MIN_PROMPT_TOKENS = 1024
# Gemini counts an inline image as a fixed number of tokens whatever its size.
INLINE_IMAGE_TOKENS = 258

WORDS = (
    "river",
    "lantern",
    "quartz",
    "meadow",
    "signal",
    "harbor",
    "ember",
    "cobalt",
    "willow",
    "summit",
    "orbit",
    "pepper",
    "canyon",
    "violet",
    "anchor",
    "meteor",
    "saffron",
    "glacier",
    "pylon",
    "thistle",
)


# The value objects here are built on every request: slotted, not frozen, because a frozen
# dataclass costs several times more to construct. Treat them as values all the same.
@dataclass(slots=True)
class ChatTurn:
    role: str  # system | user | assistant | tool
    text: str


@dataclass(slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class ChatRequest:
    """A text request, whatever format it came in."""

    model: str
    turns: tuple[ChatTurn, ...]
    tools: tuple[ToolSpec, ...] = ()
    # None/"auto": model's choice (a tool call when the last turn is the user's); "none": no tool;
    # "required": some tool; any other string names the tool to call.
    tool_choice: str | None = None
    max_output_tokens: int | None = None
    inline_images: int = 0
    # Structured output: the answer is a JSON document that fits this schema.
    json_schema: dict[str, Any] | None = None
    # The invalid_json fault hit this request: a structured answer comes back broken (structured.py).
    invalid_json: bool = False


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, sort_keys=True)


@dataclass(slots=True)
class InlineImage:
    mime_type: str
    data_b64: str


@dataclass(slots=True)
class Reply:
    text: str
    # "stop" | "length" | "tool_calls"; generate-content image replies may carry a raw
    # finishReason such as "IMAGE_SAFETY", which other formats report as a content filter.
    finish: str
    counts: TokenCounts
    tool_calls: tuple[ToolCall, ...] = ()
    images: tuple[InlineImage, ...] = field(default=())
    # The request digest the answer's ids derive from; "" lets the renderer compute it.
    digest: str = ""


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def prompt_tokens(request: ChatRequest) -> int:
    tokens = sum(count_tokens(turn.text) + TOKENS_PER_TURN for turn in request.turns)
    for tool in request.tools:
        tokens += count_tokens(json.dumps([tool.name, tool.description, tool.parameters], sort_keys=True))
    return max(1, tokens)


def request_digest(request: ChatRequest) -> str:
    """A hash of what decides the answer (model, turns, tool names), not of the raw body, so a
    streamed and a plain call, or the same request through a converter, get the same answer."""
    digest = hashlib.blake2b(request.model.encode(), digest_size=32)
    for turn in request.turns:
        digest.update(b"\x00" + turn.role.encode() + b"\x01" + turn.text.encode())
    for tool in request.tools:
        digest.update(b"\x02" + tool.name.encode())
    return digest.hexdigest()


def _answer_text(request: ChatRequest, digest: str) -> str:
    last_user = next((t.text for t in reversed(request.turns) if t.role == "user"), "")
    picks = [WORDS[byte % len(WORDS)] for byte in bytes.fromhex(digest[:16])]
    echo = " ".join(last_user[:160].split())[:80]
    return f"Emulated answer from {request.model}: {' '.join(picks)}. You said: {echo}"


def example_value(schema: Any, name: str) -> Any:
    """A deterministic value that satisfies a simple JSON schema (enough for tool arguments)."""
    if not isinstance(schema, dict):
        return name
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {key: example_value(sub, key) for key, sub in sorted(properties.items())}
    if kind == "array":
        return [example_value(schema.get("items"), name)]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    return f"example {name}"


def _tool_to_call(request: ChatRequest) -> ToolSpec | None:
    if not request.tools or request.tool_choice == "none":
        return None
    if request.tool_choice not in (None, "auto", "required"):
        return next((t for t in request.tools if t.name == request.tool_choice), request.tools[0])
    last = request.turns[-1].role if request.turns else "user"
    if last != "user" and request.tool_choice != "required":
        return None  # the tool answered: now the model speaks
    return request.tools[0]


def _forced(request: ChatRequest, tool: ToolSpec) -> bool:
    """The request names this tool: structured output through a forced tool."""
    return request.tool_choice == tool.name or (request.tool_choice == "required" and len(request.tools) == 1)


def _arguments(request: ChatRequest, tool: ToolSpec, digest: str) -> dict[str, Any]:
    """A forced tool's arguments fit its schema (or break it under the invalid_json fault); a tool the
    model chose gets the plain example values."""
    if not _forced(request, tool):
        return example_value(tool.parameters, tool.name)
    if request.invalid_json:
        return violating_value(tool.parameters)
    return schema_value(tool.parameters, digest)


def _text(request: ChatRequest, digest: str) -> str:
    if request.json_schema is not None:
        document = schema_value(request.json_schema, digest)
        return broken_text(document) if request.invalid_json else json.dumps(document, sort_keys=True)
    last_user = next((t.text for t in reversed(request.turns) if t.role == "user"), "")
    words = asked_words(last_user)
    return _answer_text(request, digest) if words is None else long_text(words, digest)


def structured(request: ChatRequest) -> bool:
    """Whether the answer is a structured one (a schema, or a forced tool): what invalid_json breaks."""
    tool = _tool_to_call(request)
    return request.json_schema is not None if tool is None else _forced(request, tool)


def _cache_split(model: ModelConfig, prompt: int) -> tuple[int, int, int, int]:
    """(uncached input, cache reads, 5-minute writes, 1-hour writes) of a prompt."""
    if not model.cache or prompt < CACHE_MIN_PROMPT_TOKENS:
        return prompt, 0, 0, 0
    read = prompt // 2
    write = prompt // 8 if model.type_target == "anthropic" else 0
    write_1h = prompt // 16 if model.type_target == "anthropic" else 0
    return prompt - read - write - write_1h, read, write, write_1h


def synthesize(request: ChatRequest, model: ModelConfig) -> Reply:
    digest = request_digest(request)
    uncached, read, write, write_1h = _cache_split(model, prompt_tokens(request))
    tool = _tool_to_call(request)
    calls: tuple[ToolCall, ...] = ()
    if tool is not None:
        call = ToolCall("call_" + digest[:24], tool.name, _arguments(request, tool, digest))
        output = count_tokens(tool.name + call.arguments_json)
        text, finish, calls = "", "tool_calls", (call,)
    else:
        text, finish = _text(request, digest), "stop"
        limit = request.max_output_tokens
        if limit is not None and count_tokens(text) > limit:
            text, finish = text[: limit * 4], "length"
        output = count_tokens(text)
    reasoning = 2 * output + 8 if model.reasoning else 0
    counts = TokenCounts(
        input=uncached,
        cache_read=read,
        cache_write=write,
        cache_write_1h=write_1h,
        output=output,
        reasoning=reasoning,
        input_image=request.inline_images * INLINE_IMAGE_TOKENS,
    )
    return Reply(text, finish, counts, calls, digest=digest)
