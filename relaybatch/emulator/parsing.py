"""Small readers for request bodies: each failure is an InvalidRequest naming the field (a 400)."""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from typing import Any

from relaybatch.emulator.codecs import fast_json
from relaybatch.emulator.problems import InvalidRequest


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = fast_json.loads(raw)
    except ValueError:
        raise InvalidRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def required_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"'{name}' is required and must be a non-empty string")
    return value


def required_text(body: dict[str, Any], name: str) -> str:
    """A required string with more than white space in it (a blank prompt is no prompt)."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"'{name}' is required and must be a non-empty string", param=name)
    return value


def unknown_fields(body: dict[str, Any], known: AbstractSet[str]) -> list[str]:
    """The fields given (a JSON null counts as not given) that ``known`` does not list, sorted."""
    return sorted({name for name, value in body.items() if value is not None} - known)


def optional_int(body: dict[str, Any], name: str, minimum: int = 1) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidRequest(f"'{name}' must be an integer >= {minimum}")
    return value


def optional_number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be a number from {low:g} to {high:g}")
    return float(value)


def optional_bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be true or false")
    return value


def object_list(body: dict[str, Any], name: str, *, required: bool) -> list[dict[str, Any]]:
    value = body.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise InvalidRequest(
            f"'{name}' is required and must be a non-empty array"
            if required
            else f"'{name}' must be an array"
        )
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidRequest(f"'{name}[{index}]' must be an object")
    return value


def text_of(content: Any, where: str) -> str:
    """The text of a message content: a string, or a list of parts whose text parts are joined.

    Non-text parts (images, files) count as no text; tool results and tool calls count as their JSON.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for index, part in enumerate(content):
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    pieces.append(part["text"])
                elif "content" in part:  # tool results nest their content
                    pieces.append(text_of(part["content"], f"{where}[{index}].content"))
                elif "input" in part or "arguments" in part or "output" in part:
                    pieces.append(json.dumps(part, sort_keys=True))
            else:
                raise InvalidRequest(f"'{where}[{index}]' must be a string or an object")
        return "\n".join(pieces)
    raise InvalidRequest(f"'{where}' must be a string or an array of content parts")
