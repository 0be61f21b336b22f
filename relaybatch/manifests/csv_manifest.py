"""The table shortcut: a CSV, JSONL or Parquet file with one row per call, columns named after request fields.

Special columns: `id` (item id, carried to the results), `kind` (default chat), `prompt` (placed
where the kind expects its text), `system`, and `image` (a file path or base64). Every other
non-empty cell is a request field; cells that hold a JSON object or array (e.g. a judgment's
`questions`) are parsed as JSON. The job name is the file's stem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast, get_args

from relaybatch.kinds import TEXT_KINDS
from relaybatch.manifests.build import place_inputs
from relaybatch.manifests.expand import Expanded, JobSource, finish_item
from relaybatch.manifests.images import ImageInputError, load_image
from relaybatch.manifests.items import Kind
from relaybatch.manifests.problems import Problem
from relaybatch.manifests.sources import NestingTooDeep, Row, iter_rows, parse_json

_SHAPING_COLUMNS = {"id", "kind", "prompt", "system", "image"}
_KINDS = get_args(Kind)


def _cell(value: Any) -> Any:
    """A cell holding a JSON object or array, parsed; other text as it is. Raise ValueError if too deep."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return parse_json(value)
        except NestingTooDeep:
            raise
        except ValueError:
            return value  # text that merely starts with a bracket
    return value


def _row_to_item(row: Row, *, job: str, file: str, base_dir: Path) -> Expanded:
    values = row.values
    kind = values.get("kind") or "chat"
    if kind not in _KINDS:
        return None, [
            Problem(file, row.line, "kind", f"'{kind}' is not a kind; use one of {', '.join(_KINDS)}")
        ]
    earlier: list[tuple[str, str]] = []
    request = {}
    for field, value in values.items():
        if field not in _SHAPING_COLUMNS and value not in ("", None):
            try:
                request[field] = _cell(value)
            except ValueError as error:
                earlier.append((field, str(error)))
    images = []
    if values.get("image") not in ("", None):
        try:
            images.append(load_image(values["image"], base_dir, kind))
        except ImageInputError as error:
            earlier.append(("image", str(error)))
    prompt = values.get("prompt") or None
    if prompt is None and kind in TEXT_KINDS:
        earlier.append(("prompt", "is required; give the user message in a prompt column"))
    earlier += place_inputs(kind, request, prompt, values.get("system") or None, images)
    item_id = str(values.get("id") or row.number)
    return finish_item(
        job=job,
        kind=cast(Kind, kind),
        request=request,
        item_id=item_id,
        carry={"id": item_id},
        file=file,
        line=row.line,
        earlier=earlier,
    )


def table_job(path: Path) -> JobSource:
    """The one job of a table shortcut file: named after the file, one item per row."""
    job, file, base_dir = path.stem, str(path), path.parent
    return JobSource(
        name=job,
        file=file,
        rows=lambda: iter_rows(path),
        to_item=lambda row: _row_to_item(row, job=job, file=file, base_dir=base_dir),
        rows_from=lambda start: iter_rows(path, start),
    )
