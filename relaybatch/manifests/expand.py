"""Rows to items: the steps every manifest format shares, and the job source they plug into."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relaybatch.manifests.checks import check_request, coerce_numbers, normalize_seconds
from relaybatch.manifests.converters import take_via
from relaybatch.manifests.items import Item, Kind, canonical_json
from relaybatch.manifests.limits import MAX_REQUEST_BYTES, megabytes
from relaybatch.manifests.problems import Problem
from relaybatch.manifests.sources import BadRow, Row, RowsFrom

# Request fields that a row's prompt or image fills: a problem with those inputs explains them.
_INPUT_FIELDS = {"messages", "input", "contents", "prompt", "state", "q", "url"}

# One row's outcome: the item when the row is good, and its problems (empty when good).
Expanded = tuple[Item | None, list[Problem]]
RowToItem = Callable[[Row], Expanded]


@dataclass
class JobSource:
    """A job as the manifest describes it: a name, where its rows are, and how a row becomes an item."""

    name: str
    file: str  # where its rows live (the data file, or the manifest for inline rows)
    rows: Callable[[], Iterator[Row | BadRow]]
    to_item: RowToItem
    kind: Kind | None = None  # None when rows choose their own kind (CSV shortcut, batch files)
    model: str | None = None
    budget_usd: Decimal | None = None
    provider: str | None = None
    # The job's output schema (refs inlined) and re-asks, for a structured job (docs/manifests.md).
    output_schema: dict[str, Any] | None = None
    max_reasks: int = 0
    noul_threshold: float | None = None  # a judgment job's, when it sets one
    # Render settings of a video job (schema.VideoSpec as a plain dict; the engine reads them).
    video: dict[str, Any] | None = None
    problems: list[Problem] = field(default_factory=list)  # found before any row is read
    # Where the job names its one model (a YAML `model:` line), for problems with its route; None
    # when rows name their own model, which is then located at its first row.
    model_where: tuple[str, int] | None = None
    rows_readable: bool = True  # False when the up-front problems leave no rows to read (no data file)
    empty: Problem | None = None  # what to report when the job gives no item and no other problem
    # The rows of a CSV or JSONL data file from a point on (those appended since a plan); None when
    # the job's rows are inline or in a Parquet file.
    rows_from: Callable[[RowsFrom], Iterator[Row | BadRow]] | None = None
    # The number of the last row the latest expansion read (a plan records it: rows appended
    # later are numbered after it).
    last_row: int = 0

    def expand(self, start: RowsFrom | None = None) -> Iterator[Expanded]:
        """Each row's item or problems, streamed; up-front problems first, then rows when readable.

        With ``start``, only the rows from there on (``rows_from``); the up-front checks were made
        when the rows before it were planned, with the same manifest."""
        if self.problems:
            yield None, list(self.problems)
        if not self.rows_readable:
            return
        if start is not None and self.rows_from is None:
            raise ValueError(f"job '{self.name}' cannot read its rows from an offset")
        rows = self.rows() if start is None or self.rows_from is None else self.rows_from(start)
        for row in rows:
            if isinstance(row, BadRow):
                yield None, [Problem(self.file, row.line, None, row.message)]
            else:
                self.last_row = row.number
                yield self.to_item(row)


def finish_item(
    *,
    job: str,
    kind: Kind,
    request: dict[str, Any],
    item_id: str,
    carry: dict[str, Any],
    file: str,
    line: int,
    earlier: list[tuple[str, str]] | None = None,
    said: Collection[tuple[str, str]] = (),
) -> Expanded:
    """Coerce numeric text, run the kind's gateway checks, and build the item when all is well.

    ``said``: (field, message) problems already reported once for the whole job (the manifest's
    own text has them); a row that has them makes no item, and they are not repeated for it."""
    found = request_problems(kind, request, earlier)
    if found:
        return None, [
            Problem(file, line, name, message) for name, message in found if (name, message) not in said
        ]
    text = canonical_json(request)
    if len(text) > MAX_REQUEST_BYTES:
        limit = f"{megabytes(MAX_REQUEST_BYTES)} ({MAX_REQUEST_BYTES:,} bytes)"
        message = f"is {len(text):,} bytes of JSON; one request is at most {limit}"
        return None, [Problem(file, line, "request", message)]
    item = Item.build(
        item_id=item_id,
        job=job,
        kind=kind,
        request=request,
        carry=carry,
        source=f"{file}:{line}",
        request_json=text,
    )
    return item, []


def request_problems(
    kind: Kind, request: dict[str, Any], earlier: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """(field, message) for everything wrong with a request, after ``earlier`` (its inputs' problems);
    numeric text is turned into numbers in place."""
    found = list(earlier or [])
    found += take_via(kind, request)
    found += coerce_numbers(request)
    found += normalize_seconds(kind, request)
    found += _not_reported(found, _first_per_field(check_request(kind, request)))
    return found


def _not_reported(earlier: list[tuple[str, str]], found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The gateway-rule problems not already said another way (a missing prompt leaves `messages` empty)."""
    said = {field_name for field_name, _ in earlier}
    if said & {"prompt", "image"}:
        said |= _INPUT_FIELDS
    return [(field_name, message) for field_name, message in found if field_name.split(".")[0] not in said]


def _first_per_field(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    # A union field (str or list) fails once per branch; one message per field reads better.
    seen: set[str] = set()
    kept = []
    for field_name, message in found:
        if field_name not in seen:
            seen.add(field_name)
            kept.append((field_name, message))
    return kept
