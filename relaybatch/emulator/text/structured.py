"""Structured answers: values that fit a request's JSON schema, broken ones, and long texts.

A structured request (chat ``response_format`` or a forced function tool, responses
``text.format``, messages' forced tool, generate-content ``responseMimeType`` + ``responseSchema``)
is answered with ``schema_value``: a document that fits the schema, its values drawn from the
request digest, so the same request always gets the same answer and a batch of different rows gets
a spread of enum values, numbers and booleans (a label summary of a run has something to count).

The ``invalid_json`` fault (faults.py) answers with ``broken_text`` (the document behind a chatty
prefix: not JSON) where the answer is text, and with ``violating_value`` (JSON of the wrong types)
where the format carries arguments as an object (messages' ``tool_use.input``, a generate-content
``functionCall``): what a client's validator must catch either way.

A prompt asking for "N words" (or "N tokens") gets an answer of about that length (within 20 %,
drawn from the digest), so a job of long answers costs what it would against a real model and a
plan has real lengths to learn from; the request's output cap still cuts it (finish ``length``).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

# Words of a long answer, as synth.WORDS: about 7 characters (2 tokens) a word with its space.
LONG_WORDS = (
    "the", "river", "carried", "lantern", "light", "across", "quiet", "meadow", "while", "signal",
    "fires", "burned", "on", "harbor", "walls", "and", "every", "ember", "drifted", "toward",
    "cobalt", "summit", "beneath", "willow", "shade",
)  # fmt: skip
# "write 500 words", "a 300-word essay", "in 200 tokens": the length a prompt asks for.
LENGTH_ASKED = re.compile(r"(\d{2,5})[\s-]*(words?|tokens?)\b", re.IGNORECASE)
MAX_ASKED_WORDS = 20_000
# Words per token the emulator's own count gives its long-answer words (tokens = characters / 4).
TOKENS_PER_WORD = 2


def _random(digest: str, salt: str = "") -> random.Random:
    return random.Random(digest + salt)


def schema_value(schema: Any, digest: str) -> Any:
    """A document that fits ``schema`` (type, enum, const, properties, items, minimum/maximum,
    minItems/maxItems, anyOf/oneOf: the subset structured output uses), drawn from ``digest``."""
    return _value(schema, _random(digest), "answer")


def _value(schema: Any, rng: random.Random, name: str) -> Any:
    if not isinstance(schema, dict):
        return f"{name} {rng.choice(LONG_WORDS)}"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list) and choices:
        return _value(rng.choice(choices), rng, name)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        return {key: _value(sub, rng, key) for key, sub in properties.items()}
    if kind == "array":
        low = int(schema.get("minItems", 1))
        high = max(low, min(int(schema.get("maxItems", 3)), low + 3))
        return [_value(schema.get("items"), rng, name) for _ in range(rng.randint(low, high))]
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 100)))
    if kind == "number":
        bottom, top = float(schema.get("minimum", 0)), float(schema.get("maximum", 1))
        return round(rng.uniform(bottom, top), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return f"{name} {rng.choice(LONG_WORDS)} {rng.choice(LONG_WORDS)}"


def violating_value(schema: Any) -> Any:
    """An object of the wrong types for ``schema``'s properties (or a string for a non-object)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return {"unexpected": "not sure"}
    wrong: dict[str, Any] = {}
    for key, sub in schema["properties"].items():
        free_string = isinstance(sub, dict) and sub.get("type") == "string" and not sub.get("enum")
        wrong[key] = 12345 if free_string else "not sure"
    return wrong or {"unexpected": "not sure"}


def broken_text(document: Any) -> str:
    """The answer a chatty model gives instead of JSON: prose around the document."""
    return "Sure! Here is the JSON you asked for: " + json.dumps(document, sort_keys=True)


def asked_words(prompt: str) -> int | None:
    """The words a prompt asks for ("500 words", "a 300-word essay"; tokens halved), or None."""
    match = LENGTH_ASKED.search(prompt)
    if match is None:
        return None
    number = int(match.group(1))
    if match.group(2).lower().startswith("token"):
        number //= TOKENS_PER_WORD
    return min(number, MAX_ASKED_WORDS)


def long_text(words: int, digest: str) -> str:
    """About ``words`` words (0.8x to 1.2x, drawn from the digest), sentences of 12 words."""
    rng = _random(digest, "long")
    count = max(1, round(words * rng.uniform(0.8, 1.2)))
    picked = [rng.choice(LONG_WORDS) for _ in range(count)]
    sentences = [" ".join(picked[i : i + 12]).capitalize() + "." for i in range(0, count, 12)]
    return " ".join(sentences)
