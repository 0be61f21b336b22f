"""Place a row's prompt, system text and images into the request of each kind.

Every kind keeps `model` inside the request dict, generate_content included: the engine takes it
out of the body and into the path (`/v1beta/models/{model}:generateContent`). Web search keeps its
`route` in the dict the same way; the other keys are its query parameters.
"""

from __future__ import annotations

from typing import Any

from relaybatch.kinds import TEXT_KINDS
from relaybatch.manifests.images import InlineImage, image_part

# The request field that receives the prompt template's text, for kinds with a single text field.
_PROMPT_FIELD = {"image": "prompt", "video": "prompt", "video_v1": "prompt", "judgment": "state"}
# The request fields a row's prompt, system text and images go into, per kind (what place_inputs writes).
FILLED_BY_INPUTS = {
    "chat": {"messages"},
    "responses": {"input", "instructions"},
    "messages": {"messages", "system"},
    "generate_content": {"contents", "systemInstruction"},
    **{kind: {field} for kind, field in _PROMPT_FIELD.items()},
    "web_search": {"q", "url"},
}


def place_inputs(
    kind: str,
    request: dict[str, Any],
    text: str | None,
    system: str | None,
    images: list[InlineImage],
) -> list[tuple[str, str]]:
    """Put the inputs into `request` in place; return (field, message) for inputs the kind cannot take."""
    if kind in TEXT_KINDS:
        if text is not None or images:
            _add_user_turn(kind, request, text or "", images)
        if system is not None:
            _add_system(kind, request, system)
        return []
    problems: list[tuple[str, str]] = []
    if images:
        problems.append(("image", f"kind {kind} takes no image input; use generate_content to edit images"))
    if system is not None:
        problems.append(("system", f"kind {kind} has no system instruction; put it in the prompt"))
    if text is not None:
        if kind == "web_search":
            request["url" if request.get("route") == "reader" else "q"] = text
        else:
            request[_PROMPT_FIELD[kind]] = text
    return problems


def _add_user_turn(kind: str, request: dict[str, Any], text: str, images: list[InlineImage]) -> None:
    parts = [image_part(kind, image) for image in images]
    if kind == "generate_content":
        turn: dict[str, Any] = {"role": "user", "parts": [{"text": text}, *parts]}
        request["contents"] = [*request.get("contents", []), turn]
        return
    if kind == "responses":
        if not images and "input" not in request:
            request["input"] = text
            return
        turn_parts = [{"type": "input_text", "text": text}, *parts]
        previous = request.get("input")
        earlier = (
            []
            if previous is None
            else ([{"role": "user", "content": previous}] if isinstance(previous, str) else previous)
        )
        request["input"] = [*earlier, {"role": "user", "content": turn_parts}]
        return
    if images:
        text_part = {"type": "text", "text": text}
        # Messages puts images before the text, as its docs advise; chat keeps text first.
        content: Any = [*parts, text_part] if kind == "messages" else [text_part, *parts]
    else:
        content = text
    request["messages"] = [*request.get("messages", []), {"role": "user", "content": content}]


def _add_system(kind: str, request: dict[str, Any], system: str) -> None:
    if kind == "chat":
        request["messages"] = [{"role": "system", "content": system}, *request.get("messages", [])]
    elif kind == "responses":
        request["instructions"] = system
    elif kind == "messages":
        request["system"] = system
    else:
        request["systemInstruction"] = {"parts": [{"text": system}]}
