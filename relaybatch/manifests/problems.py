"""Validation problems: each names where (file, line, field) and what to do.

A message reads "what is wrong; what to do": the text after its last "; " is the hint (the JSON
lines of `validate --format json` give the two apart). One problem that many rows share is one
Problem listing their lines (`rows 2-19 of nightly.csv: ...`), the first MAX_LISTED_RANGES ranges
of them and a count of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from relaybatch.errors import UserError

# Line ranges one grouped problem lists; the rows past them are counted ("and 1,204 more").
MAX_LISTED_RANGES = 5


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str | None
    message: str
    # Set when rows share this problem: the ranges of their lines (first line, last line), and how
    # many more rows have it past the listed ranges.
    rows: tuple[tuple[int, int], ...] = ()
    more_rows: int = 0

    def __str__(self) -> str:
        if self.rows:
            unit = "lines" if self.file.lower().endswith((".yaml", ".yml")) else "rows"
            ranges = ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in self.rows)
            more = f" and {self.more_rows:,} more" if self.more_rows else ""
            where = f"{unit} {ranges}{more} of {self.file}"
        else:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.field:
            where += f": {self.field}"
        return f"{where}: {self.message}"

    @property
    def hint(self) -> str:
        """What to do: the message's text after its last "; " (empty when it has none)."""
        return self.message.rpartition("; ")[2] if "; " in self.message else ""

    @property
    def what(self) -> str:
        """What is wrong: the message without its hint."""
        return self.message.rpartition("; ")[0] if "; " in self.message else self.message

    def also_at(self, line: int) -> Problem:
        """This problem, shared by one more row at ``line`` (rows come in file order)."""
        rows = self.rows or (((self.line, self.line),) if self.line is not None else ())
        if self.more_rows or not rows:
            return replace(self, rows=rows, more_rows=self.more_rows + 1)
        first, last = rows[-1]
        if first <= line <= last + 1:
            return replace(self, rows=(*rows[:-1], (first, max(line, last))))
        if len(rows) < MAX_LISTED_RANGES:
            return replace(self, rows=(*rows, (line, line)))
        return replace(self, rows=rows, more_rows=1)

    def as_json(self) -> dict[str, Any]:
        """The problem as a JSON line gives it: file, line, field, message, hint, and the rows sharing it."""
        rows = [list(pair) for pair in self.rows] or (
            [[self.line, self.line]] if self.line is not None else []
        )
        return {
            "file": self.file or None,
            "line": self.line,
            "field": self.field,
            "message": self.what,
            "hint": self.hint,
            "rows": rows,
            "more_rows": self.more_rows,
        }


class ManifestInvalid(UserError):
    """A manifest failed validation; ``problems`` lists every mistake found, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = len(problems)
        lines = "\n".join(str(problem) for problem in problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the manifest:\n{lines}")
