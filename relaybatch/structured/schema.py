"""A job's ``output_schema:``: where it comes from, and the forms the families and columns read.

A job names its schema three ways (docs/manifests.md, "Structured answers"): inline JSON Schema, a
``.json`` file beside the manifest, or a pydantic model as ``module:Class`` (its
``model_json_schema()``). ``load_output_schema`` turns any of them into one plain JSON Schema with
every ``$ref`` inlined (pydantic puts nested models under ``$defs``; generate-content's
``responseSchema`` and the typed columns want them in place). ``check_schema`` refuses a schema the
validator could not use, before a row is read.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

# The name of the forced tool (and of the responses text format) a structured job asks for.
ANSWER_NAME = "answer"
MAX_REF_DEPTH = 32


class SchemaError(ValueError):
    """An output schema that cannot be used; the message says what to do."""


def load_output_schema(value: Any, folder: Path) -> dict[str, Any]:
    """The job's output schema as plain JSON Schema, refs inlined; SchemaError when unusable."""
    if isinstance(value, dict):
        schema = value
    elif isinstance(value, str) and value.lower().endswith(".json"):
        schema = _from_file(folder / value, value)
    elif isinstance(value, str) and ":" in value:
        schema = _from_model(value)
    else:
        raise SchemaError(
            "must be a JSON Schema mapping, a .json file beside the manifest, "
            "or a pydantic model as module:Class"
        )
    inlined = inline_refs(schema)
    check_schema(inlined)
    return inlined


def _from_file(path: Path, named: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchemaError(f"schema file '{named}' not found next to the manifest; check the path") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SchemaError(f"schema file '{named}' is not readable JSON ({error}); save it as JSON") from None
    if not isinstance(document, dict):
        raise SchemaError(
            f"schema file '{named}' does not hold a JSON object; write a JSON Schema object in it"
        )
    return document


def _from_model(target: str) -> dict[str, Any]:
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SchemaError(f"cannot import module '{module_name}' ({error}); is it on PYTHONPATH?") from None
    model = getattr(module, class_name, None)
    schema_of = getattr(model, "model_json_schema", None)
    if schema_of is None:
        raise SchemaError(f"'{target}' is not a pydantic model; name one as module:Class")
    schema: dict[str, Any] = schema_of()
    return schema


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each local ``#/$defs/...`` (or ``#/definitions/...``) ref replaced by its target."""
    definitions = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def walk(node: Any, depth: int) -> Any:
        if depth > MAX_REF_DEPTH:
            raise SchemaError("refers to itself (a recursive $ref); structured output needs a finite schema")
        if isinstance(node, list):
            return [walk(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rpartition("/")[2]
            if name not in definitions:
                raise SchemaError(f"has a $ref '{ref}' that names no definition in the schema")
            rest = {key: value for key, value in node.items() if key != "$ref"}
            return walk({**definitions[name], **rest}, depth + 1)
        return {key: walk(value, depth) for key, value in node.items() if key not in ("$defs", "definitions")}

    inlined: dict[str, Any] = walk(schema, 0)
    return inlined


def check_schema(schema: dict[str, Any]) -> None:
    """Refuse a schema that is not valid JSON Schema, or whose top is not an object."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        where = "/".join(str(part) for part in error.path) or "the top"
        raise SchemaError(f"is not a valid JSON Schema at {where}: {error.message}") from None
    if schema.get("type") != "object":
        raise SchemaError("must describe an object (type: object), as every family's tools and formats need")


# generate-content's responseSchema is an OpenAPI subset: capital types, and these keys only.
_GEMINI_KEYS = {
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "propertyOrdering",
}


def gemini_schema(schema: Any) -> Any:
    """``schema`` in generate-content's ``responseSchema`` form: types in capitals (``["x", "null"]``
    becomes ``nullable``), keys it does not know (``additionalProperties``, ``title``...) left out."""
    if isinstance(schema, list):
        return [gemini_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _GEMINI_KEYS:
            continue
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            real = [kind for kind in kinds if kind != "null"]
            converted["type"] = str(real[0] if real else "string").upper()
            if len(real) < len(kinds):
                converted["nullable"] = True
        elif key == "properties":
            converted[key] = {name: gemini_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf"):
            converted[key] = gemini_schema(value)
        else:
            converted[key] = value
    if "enum" in converted:
        converted["type"] = "STRING"  # generate-content enums are strings
        converted["enum"] = [str(option) for option in converted["enum"]]
    return converted


# A string answer's length is not in its schema: a typical label or short phrase (about 6 tokens).
TYPICAL_STRING = "a short typical answer"
TYPICAL_ARRAY_LENGTH = 2


def typical_answer(schema: Any) -> Any:
    """A representative answer that fits ``schema`` (JSON Schema, or generate-content's form with
    types in capitals): the longest enum option, every property, two items a list, a short string.
    Its length is what a plan expects a structured answer to be billed for (cost_model/expected.py)."""
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return max(schema["enum"], key=lambda option: len(json.dumps(option)))
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list) and schema[keyword]:
            return typical_answer(schema[keyword][0])
    kinds = schema.get("type")
    kind = str(next((k for k in kinds if k != "null"), "null") if isinstance(kinds, list) else kinds).lower()
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties")
        return {name: typical_answer(sub) for name, sub in (properties or {}).items()}
    if kind == "array":
        count = max(TYPICAL_ARRAY_LENGTH, int(schema.get("minItems") or 0))
        return [typical_answer(schema.get("items"))] * count
    return {"string": TYPICAL_STRING, "integer": 3, "number": 0.5, "boolean": False}.get(kind)
