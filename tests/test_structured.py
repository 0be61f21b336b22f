"""The structured package: loading a job's schema, each family's request for it, re-asks, checks."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import BaseModel

from relaybatch.structured import (
    SchemaError,
    answer_fields,
    arrow_type,
    ask_for_schema,
    check_answer,
    gemini_schema,
    load_output_schema,
    reask_request,
)

LABEL = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["a", "b"]}, "score": {"type": "number"}},
    "required": ["label"],
}


class Inner(BaseModel):
    name: str


class Outer(BaseModel):
    inner: Inner
    tags: list[str]


def test_a_schema_inline_from_a_file_or_a_pydantic_model(tmp_path: Path) -> None:
    (tmp_path / "label.json").write_text(json.dumps(LABEL), encoding="utf-8")

    assert load_output_schema(LABEL, tmp_path) == LABEL
    assert load_output_schema("label.json", tmp_path) == LABEL
    outer = load_output_schema("tests.test_structured:Outer", tmp_path)
    assert outer["properties"]["inner"]["properties"] == {"name": {"title": "Name", "type": "string"}}
    assert "$defs" not in outer


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("missing.json", "not found next to the manifest"),
        ("tests.test_structured:Nothing", "is not a pydantic model"),
        ("no_such_module_x:Model", "cannot import module"),
        ({"type": "array"}, "must describe an object"),
        ({"type": "object", "properties": {"a": {"type": "wat"}}}, "not a valid JSON Schema"),
        (42, "must be a JSON Schema mapping"),
    ],
)
def test_an_unusable_schema_says_what_to_do(tmp_path: Path, value: object, words: str) -> None:
    with pytest.raises(SchemaError, match=words):
        load_output_schema(value, tmp_path)


def test_each_family_asks_in_its_own_form() -> None:
    requests: dict[str, dict[str, object]] = {
        kind: {} for kind in ("chat", "responses", "messages", "generate_content")
    }
    for kind, request in requests.items():
        ask_for_schema(kind, request, LABEL)

    assert requests["chat"]["tool_choice"] == "required"
    assert requests["responses"]["text"] == {
        "format": {"type": "json_schema", "name": "answer", "schema": LABEL, "strict": True}
    }
    assert requests["messages"]["tool_choice"] == {"type": "tool", "name": "answer"}
    assert requests["generate_content"]["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": gemini_schema(LABEL),
    }
    assert gemini_schema(LABEL)["properties"]["score"] == {"type": "NUMBER"}


def test_a_reask_carries_the_answer_and_the_error() -> None:
    asked = reask_request("chat", {"messages": [{"role": "user", "content": "label it"}]}, "nope", "not JSON")

    assert [turn["role"] for turn in asked["messages"]] == ["user", "assistant", "user"]
    assert asked["messages"][1]["content"] == "nope"
    assert "not JSON" in asked["messages"][2]["content"]
    gemini = reask_request("generate_content", {"contents": []}, "nope", "bad")
    assert [turn["role"] for turn in gemini["contents"]] == ["model", "user"]
    responses = reask_request("responses", {"input": "label it"}, "nope", "bad")
    assert [turn["role"] for turn in responses["input"]] == ["user", "assistant", "user"]


def test_checks_read_each_family_and_name_the_error() -> None:
    tool = {"function": {"name": "answer", "arguments": '{"label": "c"}'}}
    chat = check_answer(LABEL, "chat", {"tool_calls": [tool]})
    messages = check_answer(LABEL, "messages", {"tool_calls": [{"input": {"label": "a", "score": 0.5}}]})
    text = check_answer(LABEL, "generate_content", {"output_text": "Sure: {}"})

    assert chat.error is not None and "at label" in chat.error and chat.raw == '{"label": "c"}'
    assert messages.valid and messages.document == {"label": "a", "score": 0.5}
    assert text.error is not None and text.error.startswith("not JSON")


def test_schema_types_become_arrow_types() -> None:
    schema = load_output_schema("tests.test_structured:Outer", Path("."))
    fields = {field.name: field.type for field in answer_fields(schema)}

    assert fields == {
        "answer_inner": pa.struct([("name", pa.string())]),
        "answer_tags": pa.list_(pa.string()),
        "answer_json": pa.string(),
    }
    assert arrow_type({"type": "integer"}) == pa.int64()
    assert arrow_type({"anyOf": [{"type": "number"}, {"type": "null"}]}) == pa.float64()
    assert arrow_type({"type": "string", "enum": ["a"]}) == pa.dictionary(pa.int32(), pa.string())
    assert arrow_type({"anyOf": [{"type": "number"}, {"type": "string"}]}) == pa.string()
