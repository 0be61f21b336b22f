"""How values are kept in the checkpoint: times, sources, JSON text, and rows as the engine reads them."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from relaybatch.engine.store.schema import TIME_COLUMNS
from relaybatch.manifests import Item

# Text "path:line" (layouts 0 and 1) split as ``split_source`` does: the path, and the line when the
# text ends in ':' and digits an integer writes back the same (else the whole text is the path).
_SOURCE_HEAD_SQL = "rtrim({0}, '0123456789')"
_SOURCE_HAS_LINE_SQL = (
    "(substr({head}, -1) = ':' and length({head}) < length({0}) and length({0}) - length({head}) < 19 "
    "and cast(substr({0}, length({head}) + 1) as integer) || '' = substr({0}, length({head}) + 1))"
)
_SOURCE_PATH_SQL = "case when {has_line} then substr({head}, 1, length({head}) - 1) else {0} end"
_SOURCE_LINE_SQL = "case when {has_line} then cast(substr({0}, length({head}) + 1) as integer) end"
# JSON text as the store keeps it: keys sorted, no spaces after separators.
_COMPACT = (",", ":")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def now_ms() -> int:
    """Milliseconds since the epoch: an event's time as the store keeps it."""
    return time.time_ns() // 1_000_000


def split_source(source: str | None) -> tuple[str | None, int | None]:
    """An item's source text as (path, line): "data.jsonl:12" is ("data.jsonl", 12); text not
    ending in ':' and a line an integer writes back the same ("notes", "a:007") is all path.
    ``join_source`` gives the text back exactly."""
    if source is None:
        return None, None
    path, colon, line = source.rpartition(":")
    if colon and line.isascii() and line.isdigit() and len(line) < 19 and str(int(line)) == line:
        return path, int(line)
    return source, None


def join_source(path: str | None, line: int | None) -> str | None:
    if path is None:
        return None
    return path if line is None else f"{path}:{line}"


def source_sql(column: str, part: str) -> str:
    """SQL of the path (``part`` "path") or line ("line") of a "path:line" text ``column``."""
    head = _SOURCE_HEAD_SQL.format(column)
    has_line = _SOURCE_HAS_LINE_SQL.format(column, head=head)
    template = _SOURCE_PATH_SQL if part == "path" else _SOURCE_LINE_SQL
    return template.format(column, head=head, has_line=has_line)


def time_ms(value: Any) -> Any:
    """A submitted/finished time as the store keeps it: ISO 8601 text (naive: UTC) as integer
    milliseconds since the epoch; integers and None as they are; other text kept as given."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=_COMPACT, default=str)


@dataclass(frozen=True, slots=True)
class Row:
    """An item as the engine works on it: what to send, and where it stands."""

    rowid: int
    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]
    state: str
    attempts: int
    remote_id: str | None

    @classmethod
    def from_tuple(cls, row: Sequence[Any]) -> Row:
        rowid, key, item_id, job, kind, request, state, attempts, remote_id = row
        return cls(rowid, key, item_id, job, kind, json.loads(request), state, attempts, remote_id)


def chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def column_value(name: str, value: Any) -> Any:
    if name == "result" and isinstance(value, dict):
        # A key whose value is null says nothing a reader's .get() would not: not written.
        value = {key: item for key, item in value.items() if item is not None}
    if name in ("result", "cost_detail") and value is not None and not isinstance(value, str):
        return compact_json(value)
    if name == "cost_usd" and value is not None:
        return format(Decimal(value), "f")  # exact, in plain notation; never a float
    if name in TIME_COLUMNS:
        return time_ms(value)
    return value


def decoded(row: dict[str, Any]) -> dict[str, Any]:
    if "request" in row:
        row["request"] = json.loads(row["request"])
    if "carry" in row:
        row["carry"] = json.loads(row["carry"]) if row["carry"] else {}
    if "result" in row:
        row["result"] = json.loads(row["result"]) if row["result"] else None
    return row


def epoch() -> float:
    """Wall-clock seconds: not-before times must survive a restart, so no monotonic clock here."""
    return time.time()
