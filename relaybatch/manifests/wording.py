"""Validator findings in the project's words: what is wrong, then what to do, never pydantic's phrasing.

The manifest's schema (schema.py) and the gateway's rules (checks.py) are pydantic models. Every
finding of either passes through `explain`, which words one pydantic error as
"what is wrong; what to do" (the allowed values or names, the bounds, an example). `_SAY` is the
message catalogue: one entry per kind of finding those models can make. A finding of a kind it
does not know gets `UNWORDED`, and tests/manifests/test_message_catalogue.py, which walks every
field of every model with bad values, fails on it.

A problem's hint is the text after its last "; " (Problem.hint), so a hint never holds "; " itself.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

# Names a field may have in a YAML manifest: letters, digits, . _ - (run names, job names).
NAME_RULE = "use letters, digits, . _ - only (e.g. nightly-quiz)"
# One example value per field name, shown in hints ("e.g. concurrency: 16").
EXAMPLES = {
    "name": "nightly-quiz",
    "concurrency": "16",
    "rate_limit_rpm": "600",
    "budget_usd": '"5.00"',
    "model": "relay-chat-small",
    "max_tokens": "64",
    "max_completion_tokens": "64",
    "max_output_tokens": "64",
    "maxOutputTokens": "64",
    "temperature": "0.2",
    "top_p": "0.9",
    "n": "1",
    "seconds": "4",
    "size": "1280x720",
    "prompt": '"{question}"',
    "role": "user",
    "content": '"Hello"',
    "instructions": "Is the customer complaining?",
    "state": '"{text}"',
    "q": '"{query}"',
    "url": "https://example.com/page",
    "output_compression": "80",
    "data": "rows.csv",
    "provider": "alpha",
    "questions": "{complaint: {type: noul, instructions: Is it a complaint?}}",
    "messages": "[{role: user, content: Hello}]",
    "contents": '[{role: user, parts: [{text: "Hello"}]}]',
    "parts": '[{text: "Hello"}]',
    "input": '"Hello"',
}
UNWORDED = "is not accepted here; see docs/manifests.md for what this field takes"

Detail = Any  # one entry of pydantic's ValidationError.errors()
Said = str  # "what is wrong; what to do"


def plain_loc(loc: Iterable[int | str]) -> tuple[int | str, ...]:
    """A finding's location without pydantic's union-branch tags ('str', 'list[str]', ...)."""
    return tuple(part for part in loc if not (isinstance(part, str) and _is_tag(part)))


def _is_tag(part: str) -> bool:
    return "[" in part or part in {"str", "int", "float", "bool", "list", "dict", "none"}


def explain(detail: Detail, allowed: Sequence[str] = ()) -> Said:
    """One pydantic finding in the project's words; ``allowed``: the field names where a name is unknown."""
    field = next((part for part in reversed(plain_loc(detail["loc"])) if isinstance(part, str)), "")
    say = _SAY.get(detail["type"])
    if say is None:
        return UNWORDED
    return say(detail, field, allowed)


class FieldRule(ValueError):
    """A rule of a model over several fields, that belongs at one of them: raised in a validator, the
    finding is located at that field instead of at the model."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Finding:
    """One thing a model refused: where (a path inside the validated value), in words, and its kind."""

    loc: tuple[int | str, ...]
    words: Said
    type: str


def findings(error: ValidationError, allowed: Sequence[str] = ()) -> list[Finding]:
    """Each finding of a validation error in the project's words. The branches of one union field
    that all failed on type make one finding ("must be text or a list"); ``allowed`` are the field
    names of the model, for a name it does not know."""
    found: list[Finding] = []
    kinds: dict[tuple[int | str, ...], list[str]] = {}
    for detail in error.errors():
        loc = plain_loc(detail["loc"])
        cause = detail.get("ctx", {}).get("error")
        if isinstance(cause, FieldRule):
            loc = (*loc, cause.field)
        kind = _TYPES.get(detail["type"])
        if kind is not None and loc in kinds:
            kinds[loc].append(kind)
            index = next(i for i, finding in enumerate(found) if finding.loc == loc)
            words = _wrong_type(" or ".join(dict.fromkeys(kinds[loc])), detail, _name(loc))
            found[index] = Finding(loc, words, detail["type"])
            continue
        if kind is not None:
            kinds[loc] = [kind]
        found.append(Finding(loc, explain(detail, allowed), detail["type"]))
    return found


def _name(loc: tuple[int | str, ...]) -> str:
    return next((part for part in reversed(loc) if isinstance(part, str)), "")


def describe(value: Any) -> str:
    """A value as a message quotes it: text in quotes (cut at 40 characters), YAML's true/false."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value[:40]}...'" if len(value) > 40 else f"'{value}'"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice a misspelt word most likely meant, if one is close."""
    found = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def example(field: str) -> str:
    """' (e.g. FIELD: VALUE)' for a field with a known example, else nothing."""
    example = EXAMPLES.get(field)
    return f" (e.g. {field}: {example})" if example else ""


def _number(value: Any) -> str:
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _missing(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    return f"is required; add `{field}:`{example(field)}" if field else "is required; add it"


def _unknown_name(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    guess = closest(field, allowed)
    meant = f"did you mean `{guess}`? " if guess else "check its spelling: "
    names = f"the fields here are {', '.join(allowed)}" if allowed else "docs/manifests.md lists the fields"
    return f"is not a field here; {meant}{names}"


def _not_allowed(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    values = re.findall(r"'([^']*)'", str(detail.get("ctx", {}).get("expected", "")))
    guess = closest(detail["input"], values) if isinstance(detail["input"], str) else None
    meant = f" (did you mean '{guess}'?)" if guess else ""
    return f"{describe(detail['input'])} is not allowed here; use one of {', '.join(values)}{meant}"


_TYPES = {
    "string_type": "text",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "dict_type": "a mapping (name: value)",
    "model_type": "a mapping (name: value)",
    "list_type": "a list",
    "decimal_type": "an amount",
    "decimal_parsing": "an amount",
}


def _wrong_type(expected: str, detail: Detail, field: str) -> Said:
    value = detail["input"]
    if expected == "text" and isinstance(value, int | float) and not isinstance(value, bool):
        return f'must be text, not the number {value}; quote it: "{value}"{example(field)}'
    if expected == "an amount":
        return f'must be an amount in USD, not {describe(value)}; write it quoted, e.g. {field}: "5.00"'
    return f"must be {expected}, not {describe(value)}; write {expected}{example(field)}"


def _typed(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    return _wrong_type(_TYPES[detail["type"]], detail, field)


def _bound(side: str, key: str) -> Callable[[Detail, str, Sequence[str]], Said]:
    """Words for a number past a bound: side 'least'/'most' (inclusive), 'above'/'below' (exclusive)."""

    def say(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
        limit, value = _number(detail["ctx"][key]), _number(detail["input"])
        if side == "least":
            return f"is {value}, below the least allowed ({limit}); use {limit} or more{example(field)}"
        if side == "most":
            return f"is {value}, above the most allowed ({limit}); use {limit} or less{example(field)}"
        return f"is {value} and must be {side} {limit}; use a number {side} {limit}{example(field)}"

    return say


def _too_short(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    least = detail["ctx"]["min_length"]
    if detail["type"] == "string_too_short":
        return f"is empty; give a value{example(field)} or leave `{field}` out"
    entries = "entry" if least == 1 else "entries"
    actual = detail["ctx"].get("actual_length", 0)
    return f"has {actual} entries; give at least {least} {entries}{example(field)}"


def _too_long(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    most = _number(detail["ctx"]["max_length"])
    return f"is {len(detail['input']):,} characters long; shorten it to at most {most}"


def _pattern(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    return f"{describe(detail['input'])} is not a usable name; {NAME_RULE}"


def _not_finite(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    return f"{describe(detail['input'])} is not a finite number; write a number{example(field)}"


def _own(detail: Detail, field: str, allowed: Sequence[str]) -> Said:
    """A rule of ours (a ValueError in a validator): its text is already in our words."""
    return str(detail["msg"]).removeprefix("Value error, ")


_SAY: dict[str, Callable[[Detail, str, Sequence[str]], Said]] = {
    "missing": _missing,
    "extra_forbidden": _unknown_name,
    "literal_error": _not_allowed,
    **{kind: _typed for kind in _TYPES},
    "greater_than": _bound("above", "gt"),
    "less_than": _bound("below", "lt"),
    "greater_than_equal": _bound("least", "ge"),
    "less_than_equal": _bound("most", "le"),
    "string_too_short": _too_short,
    "too_short": _too_short,
    "string_too_long": _too_long,
    "string_pattern_mismatch": _pattern,
    "finite_number": _not_finite,
    "value_error": _own,
}
