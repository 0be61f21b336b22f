"""The CSV manifest shortcut: one row per call, columns named after request fields."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from relaybatch.manifests.items import Item
from relaybatch.manifests.problems import ManifestInvalid, Problem

# Columns that shape the request rather than pass through to it.
_ID_COLUMN = "id"
_PROMPT_COLUMN = "prompt"
_INT_FIELDS = {"max_tokens", "max_completion_tokens"}
_FLOAT_FIELDS = {"temperature"}


def _request_from_row(row: dict[str, str], path: Path, line: int) -> tuple[dict[str, Any], list[Problem]]:
    problems: list[Problem] = []
    request: dict[str, Any] = {}
    for field, value in row.items():
        if field in (_ID_COLUMN, _PROMPT_COLUMN) or value in ("", None):
            continue
        try:
            if field in _INT_FIELDS:
                request[field] = int(value)
            elif field in _FLOAT_FIELDS:
                request[field] = float(value)
            else:
                request[field] = value
        except ValueError:
            problems.append(Problem(str(path), line, field, f"'{value}' is not a number"))
    if not row.get("model"):
        problems.append(Problem(str(path), line, "model", "is required: name a model ID"))
    prompt = row.get(_PROMPT_COLUMN)
    if not prompt:
        problems.append(Problem(str(path), line, _PROMPT_COLUMN, "is required: give the user message"))
    request["messages"] = [{"role": "user", "content": prompt or ""}]
    return request, problems


def load_csv_manifest(path: Path) -> list[Item]:
    """Read every row, collect every problem, and return the items only when there are none."""
    job = path.stem
    items: list[Item] = []
    problems: list[Problem] = []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            line = reader.line_num
            request, row_problems = _request_from_row(row, path, line)
            problems.extend(row_problems)
            item_id = row.get(_ID_COLUMN) or str(line - 1)
            items.append(
                Item.build(
                    item_id=item_id,
                    job=job,
                    kind="chat",
                    request=request,
                    carry={_ID_COLUMN: item_id},
                    source=f"{path}:{line}",
                )
            )
    if problems:
        raise ManifestInvalid(problems)
    return items
