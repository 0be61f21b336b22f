"""The OpenAI Batch API input format, accepted as it is: JSONL lines of custom_id, method, url, body.

The url picks the kind; custom_id becomes the item id (and is carried to the results); the body is
the request. Generate-content urls carry the model in the path, so it moves into the request's
`model` like every other kind (see docs/manifests.md, "What the engine receives").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from relaybatch.manifests.expand import Expanded, JobSource, finish_item
from relaybatch.manifests.items import Kind
from relaybatch.manifests.problems import Problem
from relaybatch.manifests.sources import Row, iter_rows
from relaybatch.manifests.text_files import TextFileError, bounded_lines, open_text

URL_KINDS: dict[str, Kind] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/images/generations": "image",
    "/v2/videos": "video",
    "/v1/videos/generations": "video_v1",
    "/v1/typedjudge": "judgment",
}
_GENERATE_CONTENT = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):generateContent$")
_WEB_SEARCH = re.compile(r"^/v1/websearch/(?P<route>search|simple-search|search-news|reader)$")


def is_batch_file(path: Path) -> bool:
    """True when the first JSON object of a JSONL file has the batch fields custom_id and url.

    Broken lines before it are skipped (up to _LINES_TO_SNIFF), so a batch file whose first line is
    bad is still read as one and that line named; a file that cannot be read as text is not
    recognised here, and the table reader then names its line.
    """
    try:
        handle, _ = open_text(path)
        with handle:
            for _, line in zip(range(_LINES_TO_SNIFF), bounded_lines(handle), strict=False):
                if not line.strip():
                    continue
                try:
                    first = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                return isinstance(first, dict) and "custom_id" in first and "url" in first
    except (TextFileError, UnicodeDecodeError):
        return False
    return False


_LINES_TO_SNIFF = 100


def kind_for_url(url: str, body: dict[str, Any]) -> tuple[Kind, dict[str, Any]] | None:
    """The kind a batch url maps to and the request to send, or None for a url we do not run."""
    path = url.split("?", 1)[0]
    if path in URL_KINDS:
        return URL_KINDS[path], dict(body)
    if match := _GENERATE_CONTENT.match(path):
        return "generate_content", {"model": match["model"], **body}
    if match := _WEB_SEARCH.match(path):
        return "web_search", {"route": match["route"], **body}
    return None


def _line_to_item(row: Row, *, job: str, file: str) -> Expanded:
    """A batch line as an item: its url names the kind and route (``kind_for_url``), its body is
    the request; each field missing or wrong is a problem at the line."""
    values, line = row.values, row.line
    problems = _missing_fields(values, file, line)
    if problems:
        return None, problems
    body = values["body"]
    method = str(values.get("method", "POST")).upper()
    if not isinstance(body, dict):
        return None, [
            Problem(
                file,
                line,
                "body",
                "must be a JSON object; put the request to send in body, as the OpenAI Batch API does",
            )
        ]
    mapped = kind_for_url(str(values["url"]), body)
    if mapped is None:
        known = ", ".join([*URL_KINDS, "/v1beta/models/{model}:generateContent", "/v1/websearch/{route}"])
        return None, [
            Problem(file, line, "url", f"'{values['url']}' is not a route relaybatch runs; use {known}")
        ]
    kind, request = mapped
    expected = "GET" if kind == "web_search" else "POST"
    if method != expected:
        return None, [
            Problem(
                file,
                line,
                "method",
                f'is {method}, and {values["url"]} takes {expected}; write "method": "{expected}"',
            )
        ]
    custom_id = str(values["custom_id"])
    return finish_item(
        job=job,
        kind=cast(Kind, kind),
        request=request,
        item_id=custom_id,
        carry={"custom_id": custom_id},
        file=file,
        line=line,
    )


def _missing_fields(values: Mapping[str, Any], file: str, line: int) -> list[Problem]:
    return [
        Problem(
            file,
            line,
            name,
            "is required in a batch line; give custom_id, method, url and body on every line",
        )
        for name in ("custom_id", "url", "body")
        if name not in values
    ]


def batch_job(path: Path) -> JobSource:
    """The one job of a batch file: named after the file, one item per line."""
    job, file = path.stem, str(path)
    return JobSource(
        name=job,
        file=file,
        rows=lambda: iter_rows(path),
        to_item=lambda row: _line_to_item(row, job=job, file=file),
        rows_from=lambda start: iter_rows(path, start),
    )
