"""Each family's way of asking for a structured answer, of reading it, and of asking again.

- chat: a forced function tool, ``tools`` [one function ``answer``] with ``tool_choice: "required"``;
  the answer is the call's ``arguments`` (JSON text).
- responses: ``text.format {type: json_schema, name: answer, schema, strict: true}``; the answer is
  the output text.
- messages: a forced tool, ``tools`` [``answer`` with ``input_schema``] with ``tool_choice {type:
  tool, name: answer}``; the answer is the ``tool_use`` block's ``input``.
- generate_content: ``generationConfig.responseMimeType: application/json`` with ``responseSchema``
  (schema.gemini_schema); the answer is the text.

Chat asks through a tool because the interface documents ``tools`` (with a string ``tool_choice``)
and not ``response_format``; ``"required"`` with one tool forces it. A re-ask repeats the request
with the invalid answer as the assistant's turn and a user turn saying what was wrong.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from relaybatch.structured.schema import ANSWER_NAME, gemini_schema

STRUCTURED_KINDS = ("chat", "responses", "messages", "generate_content")
TOOL_DESCRIPTION = "Give the answer as this function's arguments."
REASK_TEXT = (
    "Your answer did not fit the required JSON schema: {error}. "
    "Answer again with only a JSON document that fits the schema."
)


def ask_for_schema(kind: str, request: dict[str, Any], schema: dict[str, Any]) -> None:
    """Add the family's structured-output request for ``schema`` to ``request``, in place."""
    if kind == "chat":
        function = {"name": ANSWER_NAME, "description": TOOL_DESCRIPTION, "parameters": schema}
        request["tools"] = [{"type": "function", "function": function}]
        request["tool_choice"] = "required"
    elif kind == "responses":
        request["text"] = {
            "format": {"type": "json_schema", "name": ANSWER_NAME, "schema": schema, "strict": True}
        }
    elif kind == "messages":
        request["tools"] = [{"name": ANSWER_NAME, "description": TOOL_DESCRIPTION, "input_schema": schema}]
        request["tool_choice"] = {"type": "tool", "name": ANSWER_NAME}
    elif kind == "generate_content":
        config = dict(request.get("generationConfig") or {})
        config["responseMimeType"] = "application/json"
        config["responseSchema"] = gemini_schema(schema)
        request["generationConfig"] = config
    else:
        raise ValueError(f"kind {kind} has no structured output; use one of {', '.join(STRUCTURED_KINDS)}")


def requested_schema(kind: str, request: Mapping[str, Any]) -> Any | None:
    """The schema ``request`` asks its answer to fit, as ``ask_for_schema`` put it there (in the
    family's own form); None when the request asks for no structured answer."""
    if kind in ("chat", "messages"):
        for tool in request.get("tools") or []:
            if not isinstance(tool, Mapping):
                continue
            function = tool.get("function") if kind == "chat" else tool
            if isinstance(function, Mapping) and function.get("name") == ANSWER_NAME:
                return function.get("parameters" if kind == "chat" else "input_schema")
        return None
    if kind == "responses":
        text = request.get("text")
        answer_format = text.get("format") if isinstance(text, Mapping) else None
        return answer_format.get("schema") if isinstance(answer_format, Mapping) else None
    if kind == "generate_content":
        config = request.get("generationConfig")
        return config.get("responseSchema") if isinstance(config, Mapping) else None
    return None


def answer_text(kind: str, result: dict[str, Any]) -> str | None:
    """The structured answer as the model gave it (JSON text, or not JSON at all); None when absent."""
    if kind in ("chat", "messages"):
        for call in result.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            if kind == "messages":
                return json.dumps(call.get("input"), ensure_ascii=False)
            arguments = (call.get("function") or {}).get("arguments")
            return arguments if isinstance(arguments, str) else json.dumps(arguments)
    text = result.get("output_text")
    return text if isinstance(text, str) else None


def reask_request(kind: str, request: dict[str, Any], answer: str | None, error: str) -> dict[str, Any]:
    """``request`` asked again: the invalid answer as the model's turn, then what was wrong."""
    asked = copy.deepcopy(request)
    said = answer if answer else "(no answer)"
    feedback = REASK_TEXT.format(error=error)
    if kind == "generate_content":
        asked["contents"] = [
            *asked.get("contents", []),
            {"role": "model", "parts": [{"text": said}]},
            {"role": "user", "parts": [{"text": feedback}]},
        ]
    elif kind == "responses":
        earlier = asked.get("input")
        turns = [{"role": "user", "content": earlier}] if isinstance(earlier, str) else list(earlier or [])
        asked["input"] = [
            *turns,
            {"role": "assistant", "content": said},
            {"role": "user", "content": feedback},
        ]
    else:
        asked["messages"] = [
            *asked.get("messages", []),
            {"role": "assistant", "content": said},
            {"role": "user", "content": feedback},
        ]
    return asked
