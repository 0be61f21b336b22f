"""Checking a structured answer against its schema (``jsonschema``, Draft 2020-12).

``check_answer`` reads the answer the family gave (requests.answer_text), parses it as JSON and
validates it; the first error (jsonschema's ``best_match``) is what the re-ask feeds back and what
an item still invalid after its re-asks keeps as its reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from relaybatch.structured.requests import answer_text

INVALID_OUTPUT = "invalid_output"
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class Checked:
    """One answer checked: the document when it fits, else the error; the raw text either way."""

    raw: str | None
    document: Any = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(schema_json))


def check_answer(schema: dict[str, Any], kind: str, result: dict[str, Any]) -> Checked:
    raw = answer_text(kind, result)
    if raw is None:
        return Checked(None, error="no answer (no text and no tool call)")
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as error:
        return Checked(raw, error=f"not JSON ({error.msg} at character {error.pos})")
    import jsonschema

    validator = _validator(json.dumps(schema, sort_keys=True))
    problem = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if problem is None:
        return Checked(raw, document)
    where = "/".join(str(part) for part in problem.absolute_path) or "the top"
    return Checked(raw, error=f"at {where}: {problem.message}"[:MAX_ERROR_CHARS])
