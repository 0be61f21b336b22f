"""Output that is not a terminal is never wrapped or cut; a terminal still gets its width."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.console import NOT_A_TERMINAL_WIDTH, output_console, table

REPO_ROOT = Path(__file__).resolve().parents[1]
EVERYTHING = REPO_ROOT / "configs" / "manifests" / "everything.yaml"


def test_a_file_gets_unlimited_width_and_a_terminal_its_own() -> None:
    assert output_console(file=io.StringIO()).width == NOT_A_TERMINAL_WIDTH
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as screen:
            console = output_console(file=screen)
            assert console.is_terminal
            assert console.width < NOT_A_TERMINAL_WIDTH
    finally:
        os.close(leader)
        os.close(follower)


def test_a_long_validate_line_stays_one_line_under_a_long_path(tmp_path: Path) -> None:
    deep = tmp_path / ("a-much-longer-folder-name-than-a-terminal-is-wide-" * 3) / "clone"
    deep.mkdir(parents=True)
    manifest = deep / "look.yaml"
    manifest.write_text('jobs:\n  - {name: look, kind: web_search, prompt: "{t}", items: [{t: a}, {t: b}]}\n')

    result = CliRunner().invoke(app, ["validate", str(manifest)], env={"COLUMNS": "40"})

    assert result.exit_code == 0, result.output
    assert f"{manifest}: valid, 2 items in 1 jobs\n" in result.output


def test_a_plan_table_written_to_a_file_keeps_every_cell_whole(tmp_path: Path) -> None:
    """COLUMNS and a terminal on stdin used to narrow the table to the screen even in a file."""
    output = tmp_path / "plan.txt"
    with output.open("w") as file:
        subprocess.run(
            [sys.executable, "-m", "relaybatch", "plan", str(EVERYTHING)],
            stdout=file,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "50"},
            cwd=tmp_path,
            check=True,
            timeout=120,
        )
    text = output.read_text()

    assert "…" not in text
    lines = text.splitlines()
    first_table = lines[: next(n for n, line in enumerate(lines) if line.startswith("└"))]
    rows = [line for line in first_table if line.startswith("│")]  # the cost table (a poll plan follows)
    assert rows, text
    # One line per row: the expected and worst-case cells hold six decimals, whole.
    money = [line.split("│")[-4:-2] for line in rows[1:]]
    assert all(cell.strip().count(".") == 1 for cells in money for cell in cells), text
    assert "expected total:" in text and "(what a budget reserves; the gateway never bills more)" in text


def test_cells_fold_on_a_narrow_terminal_rather_than_end_in_an_ellipsis() -> None:
    console = output_console(file=io.StringIO(), width=30)
    grid = table("job", "est. USD", whole=("est. USD",))
    grid.add_row("a-job-with-a-rather-long-name", "0.123456789012")
    console.print(grid)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text
    assert "0.123" in text and "9012" in text
