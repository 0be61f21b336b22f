"""Answers of every family turned into one result shape, so results share typed columns.

A result has ``output_text``, ``tool_calls``, ``finish_reason``, ``model``, ``usage`` (the family's
own usage object, kept whole for the costs package), and per kind ``media_paths``, ``answers``
(typed judgment) or ``search``. The results' token columns (input/output/cached/reasoning) are not
stored beside ``usage`` (the same counts twice): ``result_tokens`` reads them from it with the
costs package's one usage normaliser, so they mean in the results exactly what they mean in the
ledger (docs/costs.md, "Usage"). Results stored before carry them as ``tokens``, used as they are.
"""

from __future__ import annotations

import json
from typing import Any

from relaybatch.cost_model import token_counts
from relaybatch.engine.media import MediaFiles


def as_dict(answer: Any) -> dict[str, Any]:
    """A client model (pydantic) or a plain dict, as the wire's JSON object."""
    if hasattr(answer, "model_dump"):
        dumped: dict[str, Any] = answer.model_dump(mode="json", by_alias=True)
        return dumped
    if isinstance(answer, dict):
        return answer
    raise TypeError(f"unexpected answer type {type(answer).__name__}")


def _get(mapping: Any, *names: str) -> Any:
    """The first present key among camelCase / snake_case spellings."""
    if not isinstance(mapping, dict):
        return None
    for name in names:
        if mapping.get(name) is not None:
            return mapping[name]
    return None


def chat_result(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices") or [{}]
    message = choices[0].get("message") or {}
    usage = answer.get("usage") or {}
    return {
        "output_text": message.get("content"),
        "tool_calls": message.get("tool_calls") or None,
        "finish_reason": choices[0].get("finish_reason"),
        "model": answer.get("model"),
        "usage": usage,
    }


def responses_result(answer: dict[str, Any]) -> dict[str, Any]:
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for entry in answer.get("output") or []:
        if entry.get("type") == "message":
            texts.extend(
                part.get("text", "")
                for part in entry.get("content") or []
                if part.get("type") == "output_text"
            )
        elif entry.get("type") == "function_call":
            tool_calls.append(entry)
    usage = answer.get("usage") or {}
    incomplete = _get(answer.get("incomplete_details"), "reason")
    return {
        "output_text": "".join(texts) if texts else None,
        "tool_calls": tool_calls or None,
        "finish_reason": incomplete or answer.get("status"),
        "model": answer.get("model"),
        "usage": usage,
    }


def messages_result(answer: dict[str, Any]) -> dict[str, Any]:
    blocks = answer.get("content") or []
    texts = [block.get("text", "") for block in blocks if block.get("type") == "text"]
    tool_calls = [block for block in blocks if block.get("type") == "tool_use"]
    usage = answer.get("usage") or {}
    return {
        "output_text": "".join(texts) if texts else None,
        "tool_calls": tool_calls or None,
        "finish_reason": answer.get("stop_reason"),
        "model": answer.get("model"),
        "usage": usage,
    }


def generate_content_result(answer: dict[str, Any], media: MediaFiles) -> dict[str, Any]:
    candidates = answer.get("candidates") or [{}]
    parts = (candidates[0].get("content") or {}).get("parts") or []
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    paths: list[str] = []
    for part in parts:
        if part.get("text") is not None and not part.get("thought"):
            texts.append(part["text"])
        inline = _get(part, "inlineData", "inline_data")
        if inline:
            path = media.write_base64(len(paths), _get(inline, "data"), _get(inline, "mimeType", "mime_type"))
            if path:
                paths.append(path)
        call = _get(part, "functionCall", "function_call")
        if call:
            tool_calls.append(call)
    usage = _get(answer, "usageMetadata", "usage_metadata") or {}
    return {
        "output_text": "".join(texts) if texts else None,
        "tool_calls": tool_calls or None,
        "finish_reason": _get(candidates[0], "finishReason", "finish_reason"),
        "model": _get(answer, "modelVersion", "model_version"),
        "usage": usage,
        "media_paths": paths,
    }


def image_result(
    answer: dict[str, Any], media: MediaFiles, output_format: str, requested_model: str | None = None
) -> dict[str, Any]:
    """The images route's answer names no model: the one asked for stands in."""
    fmt = answer.get("output_format") or output_format
    paths: list[str] = []
    for entry in answer.get("data") or []:
        path = media.write_base64(len(paths), entry.get("b64_json"), f"image/{fmt}")
        if path:
            paths.append(path)
    usage = answer.get("usage") or {}
    return {
        "output_text": None,
        "finish_reason": "completed" if paths else "no_image",
        "model": answer.get("model") or requested_model,
        "usage": usage,
        "media_paths": paths,
        "image": {name: answer.get(name) for name in ("size", "quality", "output_format", "background")},
    }


def judgment_result(answer: dict[str, Any]) -> dict[str, Any]:
    usage = answer.get("usage") or {}
    return {
        "answers": answer.get("answers") or {},
        "model": answer.get("model"),
        "usage": usage,
    }


def web_search_result(answer: dict[str, Any]) -> dict[str, Any]:
    """The reader's page text is ``output_text``; search routes give ``search.results``, each hit
    with its title, url, snippet and the passages (``contexts``) of a deep or news search."""
    data: dict[str, Any] = answer["data"] if isinstance(answer.get("data"), dict) else {}
    organic = [hit for hit in data.get("organic") or [] if isinstance(hit, dict)]
    return {
        "output_text": answer.get("content"),
        "search": {"results": [_search_hit(hit) for hit in organic], "took_ms": answer.get("took_ms")},
        "usage": {"requests": 1},
    }


def _search_hit(hit: dict[str, Any]) -> dict[str, Any]:
    contexts = [context for context in hit.get("contexts") or [] if isinstance(context, dict)]
    contexts.sort(key=lambda context: context.get("idx") or 0)
    return {
        "title": hit.get("title"),
        "url": hit.get("link") or hit.get("url"),
        "snippet": hit.get("snippet"),
        "contexts": [context.get("text") for context in contexts],
    }


def result_tokens(kind: str, result: dict[str, Any]) -> dict[str, int | None] | None:
    """The results' token columns of a stored result: its ``tokens`` when it carries them (stored
    before they were derived), else read from its ``usage`` by the cost model; None for kinds
    without token counts."""
    tokens = result.get("tokens")
    if isinstance(tokens, dict):
        return tokens
    return token_counts(kind, result.get("usage"), len(result.get("media_paths") or []))


def tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """One tool call of any family as ``{id, name, arguments}``, arguments as JSON text.

    chat: ``{id, function: {name, arguments}}``; responses: ``{call_id, name, arguments}``;
    messages: ``{id, name, input}``; generate-content: ``{id?, name, args}``. Applying it to its
    own output gives the same dict back.
    """
    function = call.get("function")
    if isinstance(function, dict):
        return {
            "id": call.get("id"),
            "name": function.get("name"),
            "arguments": _json_text(function.get("arguments")),
        }
    arguments = next((call[name] for name in ("arguments", "input", "args") if name in call), None)
    return {
        "id": call.get("call_id") or call.get("id"),
        "name": call.get("name"),
        "arguments": _json_text(arguments),
    }


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
