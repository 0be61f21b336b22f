"""Prompt templates: `{column}` placeholders filled from a row, with no code execution.

The syntax is Python's str.format field syntax restricted to bare names: `{column}` inserts a
value, `{{` and `}}` write literal braces. Attribute access, indexing, conversions and format
specs are refused, so a manifest can never reach into objects or run code.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

_FORMATTER = string.Formatter()


class TemplateError(ValueError):
    """A template that cannot be parsed or uses more than bare `{column}` names."""

    location: tuple[int | str, ...] = ()  # where in the manifest, set by the caller that knows


def template_fields(template: str) -> list[str]:
    """The column names a template uses, in order; raise TemplateError on a malformed template."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as error:
        raise TemplateError(
            f"bad template {template!r}: {error}; write literal braces as {{{{ and }}}}"
        ) from None
    names: list[str] = []
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            extra = ("!" + conversion if conversion else "") + (":" + spec if spec else "")
            raise TemplateError(
                f"bad placeholder {{{name}{extra}}} in template; use a bare column name such as {{question}}"
            )
        names.append(name)
    return names


def whole_field(template: str) -> str | None:
    """The column name when the template is exactly one placeholder, e.g. '{n}' -> 'n'."""
    parsed = list(_FORMATTER.parse(template))
    if len(parsed) == 1 and parsed[0][0] == "" and parsed[0][1]:
        return parsed[0][1]
    return None


def render(template: str, row: Mapping[str, Any]) -> str:
    """Fill a template; a missing column raises KeyError (callers check fields first)."""
    parts: list[str] = []
    for literal, name, _spec, _conversion in _FORMATTER.parse(template):
        parts.append(literal)
        if name is not None:
            value = row[name]
            parts.append("" if value is None else str(value))
    return "".join(parts)


def fill(value: Any, row: Mapping[str, Any]) -> Any:
    """Fill every template string inside a request value (dicts and lists walked recursively).

    A string that is exactly one placeholder takes the row's value as it is, so numbers and
    JSON objects from JSONL or Parquet keep their type.
    """
    if isinstance(value, str):
        if "{" not in value and "}" not in value:
            return value
        column = whole_field(value)
        if column is not None:
            return row[column]
        return render(value, row)
    if isinstance(value, dict):
        return {key: fill(inner, row) for key, inner in value.items()}
    if isinstance(value, list):
        return [fill(inner, row) for inner in value]
    return value


def fields_in(value: Any, location: str = "") -> Iterable[tuple[str, str]]:
    """Every (location, column) used by the templates inside a value; raise TemplateError if malformed."""
    if isinstance(value, str):
        if "{" in value or "}" in value:
            for name in template_fields(value):
                yield location, name
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from fields_in(inner, f"{location}.{key}" if location else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from fields_in(inner, f"{location}[{index}]")
