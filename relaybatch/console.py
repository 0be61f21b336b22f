"""The one place that builds rich consoles: wrapped to the screen on a terminal, never off one.

Rich sizes its output to the terminal it can find, even when stdout itself is a file or a pipe
(it falls back to stdin's terminal, then to 80 columns), so `relaybatch plan > plan.txt` cut the
USD column to ``0.0001…`` and a long manifest path wrapped a sentence in two. Off a terminal a
line is a record someone greps or a test reads: its width is the content's, not a screen's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

from rich.console import Console, ConsoleDimensions
from rich.table import Table

# Wide enough that no line, table or cell is ever wrapped or cut off a terminal; tables are not
# expanded, so they keep their natural width (nothing is padded to this).
NOT_A_TERMINAL_WIDTH = 100_000


class OutputConsole(Console):
    """A rich console that decides its width when it prints: the screen's on a terminal,
    unlimited otherwise (a file, a pipe, CI logs, a test's captured output)."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal:
            return size
        return ConsoleDimensions(NOT_A_TERMINAL_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        width, height = new_size
        self._width, self._height = width, height


def output_console(*, stderr: bool = False, file: IO[str] | None = None, width: int | None = None) -> Console:
    """A console for command output (stdout), or for progress and notes (``stderr=True``).

    ``file`` and ``width`` are for tests that read what a person at a screen of that width sees;
    with ``width`` set the console behaves as a terminal of that size.
    """
    if width is not None:
        return Console(file=file, stderr=stderr, width=width)
    return OutputConsole(file=file, stderr=stderr)


def table(*headers: str, title: str | None = None, whole: Sequence[str] = ()) -> Table:
    """A table whose cells fold onto a second line on a narrow terminal instead of ending in "…"
    (a cut-off amount of money reads as a different amount). Columns named in ``whole`` (numbers,
    money) are never broken: the other columns fold to make room for them."""
    grid = Table(title=title)
    for header in headers:
        grid.add_column(header, overflow="fold", no_wrap=header in whole)
    return grid
