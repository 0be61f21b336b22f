"""A progress bar in a notebook cell: the engine's figures as HTML, redrawn in place.

The engine reports snapshots in its own thread (``Latest`` keeps the last one); the cell's thread,
which waits for the run, draws it every quarter second through an IPython display id, so the bar
is one output that updates (Jupyter, VS Code, nbclient all keep it as one). The figures and their
wording are the terminal's (engine/progress.py), not a second set.
"""

from __future__ import annotations

import html
import sys
from typing import Any

from relaybatch.engine.progress import Rates, Snapshot, figures, headline, money_text


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel attached)."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Latest:
    """A progress reporter that only keeps the engine's last snapshot, for another thread to draw."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def finish(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot


class Quiet:
    """A progress reporter that shows nothing (``Run.run(progress=False)``)."""

    def update(self, snapshot: Snapshot) -> None:
        pass

    def finish(self, snapshot: Snapshot) -> None:
        pass


class NotebookBar:
    """An HTML ``<progress>`` bar and the run's headline and money, in one updating output."""

    def __init__(self, latest: Latest, label: str) -> None:
        from IPython.display import HTML, display

        self.latest = latest
        self.label = label
        self.rates = Rates()
        self.drawn: Snapshot | None = None
        self.handle: Any = display(HTML(self._html(None)), display_id=True)

    def draw(self) -> None:
        snapshot = self.latest.snapshot
        if snapshot is None or snapshot is self.drawn:
            return
        from IPython.display import HTML

        self.drawn = snapshot
        self.rates.add(snapshot)
        self.handle.update(HTML(self._html(snapshot)))

    def _html(self, snapshot: Snapshot | None) -> str:
        if snapshot is None:
            return f"<div><b>{html.escape(self.label)}</b>: starting</div>"
        shown = figures(snapshot, self.rates)
        total = shown.total or 0
        state = f" · stopped: {snapshot.stopped}" if snapshot.stopped else ""
        return (
            f"<div><b>{html.escape(self.label)}</b> "
            f'<progress value="{shown.done}" max="{max(total, 1)}" style="width: 40%"></progress> '
            f"{html.escape(headline(shown))}<br>{html.escape(money_text(snapshot) + state)}</div>"
        )
