"""Validation problems: each names where (file, line, field) and what to do."""

from __future__ import annotations

from dataclasses import dataclass

from relaybatch.errors import UserError


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.field:
            where += f": {self.field}"
        return f"{where}: {self.message}"


class ManifestInvalid(UserError):
    """A manifest failed validation; ``problems`` lists every mistake found, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = len(problems)
        lines = "\n".join(str(problem) for problem in problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the manifest:\n{lines}")
