"""The generate-content format: request reading, the GenerateContentResponse and its two stream forms."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any

from relaybatch.emulator.billing import TokenCounts
from relaybatch.emulator.codecs import fast_json
from relaybatch.emulator.codecs.sse import pieces, sse
from relaybatch.emulator.parsing import object_list, optional_int, optional_number, text_of
from relaybatch.emulator.problems import InvalidRequest
from relaybatch.emulator.text.answer import Answer
from relaybatch.emulator.text.synth import ChatRequest, ChatTurn, ToolSpec

FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
# Inline data a text model accepts; anything else is INVALID_ARGUMENT.
SUPPORTED_MIME_TYPES = {
    "image/png",
    "image/jpeg",
    "image/webp",
    "image/heic",
    "image/heif",
    "application/pdf",
    "text/plain",
}


def _inline_data(part: dict[str, Any], where: str) -> None:
    inline = part["inlineData"]
    if not isinstance(inline, dict):
        raise InvalidRequest(f"'{where}.inlineData' must be an object with mimeType and data")
    mime = inline.get("mimeType")
    if mime not in SUPPORTED_MIME_TYPES:
        raise InvalidRequest(f"'{where}.inlineData.mimeType' {mime!r} is not supported")
    data = inline.get("data")
    try:
        base64.b64decode(data if isinstance(data, str) else "!", validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"'{where}.inlineData.data' must be base64") from None


def _turns(body: dict[str, Any]) -> tuple[list[ChatTurn], int]:
    """The turns' text and how many inline images they carry."""
    turns, images = [], 0
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        turns.append(ChatTurn("system", text_of(system.get("parts"), "systemInstruction.parts")))
    for index, content in enumerate(object_list(body, "contents", required=True)):
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise InvalidRequest(f"'contents[{index}].parts' must be a non-empty array")
        texts = []
        for number, part in enumerate(parts):
            where = f"contents[{index}].parts[{number}]"
            if not isinstance(part, dict):
                raise InvalidRequest(f"'{where}' must be an object")
            if "inlineData" in part:
                _inline_data(part, where)
                images += str(part["inlineData"]["mimeType"]).startswith("image/")
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif "functionCall" in part or "functionResponse" in part:
                texts.append(json.dumps(part, sort_keys=True))
            else:
                raise InvalidRequest(f"'{where}' needs text, inlineData, functionCall or functionResponse")
        role = content.get("role", "user")
        if role not in ("user", "model", "function", "tool"):
            raise InvalidRequest(f"'contents[{index}].role' must be user or model")
        has_response = any(isinstance(p, dict) and "functionResponse" in p for p in parts)
        turns.append(
            ChatTurn("tool" if has_response else {"model": "assistant"}.get(role, "user"), "\n".join(texts))
        )
    return turns, images


def _tools(body: dict[str, Any]) -> tuple[ToolSpec, ...]:
    specs = []
    for index, tool in enumerate(object_list(body, "tools", required=False)):
        for number, declaration in enumerate(tool.get("functionDeclarations") or []):
            if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
                raise InvalidRequest(f"'tools[{index}].functionDeclarations[{number}].name' is required")
            schema = declaration.get("parameters") or declaration.get("parametersJsonSchema") or {}
            specs.append(ToolSpec(declaration["name"], str(declaration.get("description") or ""), schema))
    return tuple(specs)


def _lowercase_types(schema: Any) -> Any:
    """Gemini schemas spell types in capitals (``STRING``); the synthesizer reads JSON-schema spelling."""
    if isinstance(schema, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lowercase_types(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lowercase_types(item) for item in schema]
    return schema


def parse(body: dict[str, Any], path_model: str | None = None) -> ChatRequest:
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("'generationConfig' must be an object")
    optional_number(config, "temperature", 0, 2)
    limit = optional_int(config, "maxOutputTokens")
    turns, images = _turns(body)
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    choice = {"NONE": "none", "ANY": "required"}.get(str(mode).upper()) if mode else None
    schema = None
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or config.get("responseSchema") or {"type": "object"}
    tools = tuple(ToolSpec(t.name, t.description, _lowercase_types(t.parameters)) for t in _tools(body))
    return ChatRequest(
        str(path_model),
        tuple(turns),
        tools,
        choice,
        limit,
        inline_images=images,
        json_schema=_lowercase_types(schema),
    )


def usage(counts: TokenCounts) -> dict[str, Any]:
    """promptTokenCount includes cached tokens; candidatesTokenCount excludes thoughts."""
    prompt = counts.input + counts.cache_read + counts.input_image
    candidates = counts.output + counts.output_image
    metadata: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + counts.reasoning,
        "promptTokensDetails": _modalities(counts.input + counts.cache_read, counts.input_image),
        "candidatesTokensDetails": _modalities(counts.output, counts.output_image),
    }
    if counts.cache_read:
        metadata["cachedContentTokenCount"] = counts.cache_read
    if counts.reasoning:
        metadata["thoughtsTokenCount"] = counts.reasoning
    return metadata


def _modalities(text: int, image: int) -> list[dict[str, Any]]:
    details = [{"modality": "TEXT", "tokenCount": text}]
    if image:
        details.append({"modality": "IMAGE", "tokenCount": image})
    return details


def _parts(answer: Answer) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if answer.reply.text or not (answer.reply.tool_calls or answer.reply.images):
        parts.append({"text": answer.reply.text})
    for call in answer.reply.tool_calls:
        parts.append({"functionCall": {"name": call.name, "args": call.arguments}})
    for image in answer.reply.images:
        parts.append({"inlineData": {"mimeType": image.mime_type, "data": image.data_b64}})
    return parts


def _finish(answer: Answer) -> str:
    return FINISH_REASONS.get(answer.reply.finish, answer.reply.finish)


def _frame(answer: Answer, parts: list[dict[str, Any]], *, last: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if last:
        candidate["finishReason"] = _finish(answer)
    frame: dict[str, Any] = {"candidates": [candidate], "modelVersion": answer.model}
    frame["responseId"] = answer.id("")
    if last:
        frame["usageMetadata"] = usage(answer.counts)
    return frame


def render(answer: Answer) -> dict[str, Any]:
    return _frame(answer, _parts(answer), last=True)


def _frames(answer: Answer) -> list[dict[str, Any]]:
    """Text in pieces, then each other part, each a response; finishReason and usage in the last."""
    parts = _parts(answer)
    split: list[list[dict[str, Any]]] = []
    for part in parts:
        if "text" in part:
            split.extend([{"text": piece}] for piece in pieces(part["text"]))
        else:
            split.append([part])
    return [_frame(answer, chunk, last=i == len(split) - 1) for i, chunk in enumerate(split)]


def stream(answer: Answer, body: dict[str, Any]) -> Iterator[bytes]:
    """``?alt=sse`` form: ``data: {GenerateContentResponse}`` frames."""
    for frame in _frames(answer):
        yield sse(frame)


def stream_json_array(answer: Answer, body: dict[str, Any]) -> Iterator[bytes]:
    """Form without ``alt=sse``: one JSON array, streamed element by element."""
    for index, frame in enumerate(_frames(answer)):
        yield (b"[" if index == 0 else b",\r\n") + fast_json.dumps(frame)
    yield b"]"
