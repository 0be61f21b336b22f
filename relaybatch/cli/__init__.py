"""The `relaybatch` command line: thin commands over the library; user errors exit 1 in one line.

One typer app (``app``), its commands in a module each by what they do, imported here in the order
`relaybatch --help` lists them: running a manifest (``_running``: run, partition, submit), checking
one (``_checking``: validate, plan), looking after a run (``_watching``: status, cancel, resolve),
its files (``_exporting``: export, report, merge) and serving (``_serving``: deploy, serve, emulator
serve). What they share (the app, the console, the options, the catalog check) is ``_app``.
Importing this package loads no engine, plotly or OpenTelemetry: each command imports what it uses.
"""

from __future__ import annotations

from relaybatch.cli._app import app

# Each module registers its commands on ``app`` when imported: this order is `relaybatch --help`'s.
# isort: off
from relaybatch.cli import _running, _checking, _watching, _exporting, _serving
# isort: on

COMMAND_MODULES = (_running, _checking, _watching, _exporting, _serving)


def main() -> None:  # pragma: no cover - console entry for `python -m relaybatch`
    app(prog_name="relaybatch")


__all__ = ["app", "main"]
