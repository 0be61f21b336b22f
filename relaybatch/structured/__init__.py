"""Structured answers: a job's output schema, each family's request for it, checking and re-asking,
and the typed columns a valid answer fills (docs/manifests.md, "Structured answers")."""

from relaybatch.structured.columns import RAW_COLUMN, answer_fields, answer_row, arrow_type
from relaybatch.structured.requests import (
    STRUCTURED_KINDS,
    answer_text,
    ask_for_schema,
    reask_request,
    requested_schema,
)
from relaybatch.structured.schema import (
    ANSWER_NAME,
    SchemaError,
    check_schema,
    gemini_schema,
    inline_refs,
    load_output_schema,
    typical_answer,
)
from relaybatch.structured.validation import INVALID_OUTPUT, Checked, check_answer

__all__ = [
    "ANSWER_NAME",
    "INVALID_OUTPUT",
    "RAW_COLUMN",
    "STRUCTURED_KINDS",
    "Checked",
    "SchemaError",
    "answer_fields",
    "answer_row",
    "answer_text",
    "arrow_type",
    "ask_for_schema",
    "check_answer",
    "check_schema",
    "gemini_schema",
    "inline_refs",
    "load_output_schema",
    "reask_request",
    "requested_schema",
    "typical_answer",
]
