"""A structured job's typed result columns, derived from its schema, and their values.

Each top-level property of the schema is a column ``answer_<property>``: ``string`` as string, a
string ``enum`` as a dictionary-encoded string, ``integer`` as int64, ``number`` as float64,
``boolean`` as bool, an ``array`` as a list of its items' type, a nested ``object`` as a struct of
its properties (recursively); a type the schema leaves open (``anyOf`` of several, no ``type``) is
its JSON text. ``answer_json`` beside them keeps the answer as the model gave it (valid or not), as
judgments keep their ``answer_*`` columns beside the raw result. A value that does not fit its
column (it cannot, once validated, unless the schema allows more than its type) is written null.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from relaybatch.structured.requests import answer_text

RAW_COLUMN = "answer_json"
ENUM_TYPE = pa.dictionary(pa.int32(), pa.string())
_SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


def _type_name(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        real = [name for name in kind if name != "null"]
        kind = real[0] if len(real) == 1 else None
    if kind is None:
        choices = [
            choice for choice in schema.get("anyOf") or schema.get("oneOf") or [] if isinstance(choice, dict)
        ]
        real_choices = [choice for choice in choices if choice.get("type") != "null"]
        if len(real_choices) == 1:
            return _type_name(real_choices[0])
        if "properties" in schema:
            return "object"
    return kind if isinstance(kind, str) else None


def _real(schema: dict[str, Any]) -> dict[str, Any]:
    """The one non-null choice of an ``anyOf`` (pydantic's ``Optional``), else the schema itself."""
    choices = [
        choice for choice in schema.get("anyOf") or schema.get("oneOf") or [] if isinstance(choice, dict)
    ]
    real = [choice for choice in choices if choice.get("type") != "null"]
    return real[0] if "type" not in schema and len(real) == 1 else schema


def arrow_type(schema: Any) -> pa.DataType:
    """The Arrow type of a value that fits ``schema``."""
    if not isinstance(schema, dict):
        return pa.string()
    schema = _real(schema)
    kind = _type_name(schema)
    enum = schema.get("enum")
    if enum and all(isinstance(option, str) for option in enum):
        return ENUM_TYPE
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return pa.list_(arrow_type(schema.get("items")))
    if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        return pa.struct([(name, arrow_type(sub)) for name, sub in schema["properties"].items()])
    return pa.string()  # open: its JSON text


def answer_fields(schema: dict[str, Any]) -> list[pa.Field]:
    """``answer_<property>`` per top-level property, then ``answer_json``."""
    properties = schema.get("properties") or {}
    fields = [pa.field(f"answer_{name}", arrow_type(sub)) for name, sub in properties.items()]
    return [*fields, pa.field(RAW_COLUMN, pa.string())]


def _value(value: Any, data_type: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(data_type):
        if not isinstance(value, dict):
            return None
        return {field.name: _value(value.get(field.name), field.type) for field in data_type}
    if pa.types.is_list(data_type):
        return [_value(item, data_type.value_type) for item in value] if isinstance(value, list) else None
    if data_type == pa.string() and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value


def answer_row(schema: dict[str, Any], kind: str, result: dict[str, Any]) -> list[Any]:
    """The values of ``answer_fields`` for one item's result (nulls when it has no valid answer)."""
    document = result.get("structured")
    properties = schema.get("properties") or {}
    values = [
        _value(document.get(name), arrow_type(sub)) if isinstance(document, dict) else None
        for name, sub in properties.items()
    ]
    return [*values, answer_text(kind, result) if result else None]
