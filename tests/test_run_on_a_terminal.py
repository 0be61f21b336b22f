"""`relaybatch run` on a real pseudo-terminal, 120 columns wide: what a person sees."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
MANIFEST = """\
run: {name: screen, budget_usd: "2.00"}
jobs:
  - {name: ask, kind: chat, model: relay-chat-small, request: {max_tokens: 16}, prompt: "{q}",
     items: [{q: one}, {q: two}, {q: three}, {q: four}, {q: five}, {q: six}]}
  - {name: look, kind: web_search, prompt: "{q}", items: [{q: tides}, {q: moons}]}
"""


def run_on_a_terminal(arguments: list[str], columns: int, cwd: Path) -> tuple[str, float, int]:
    """Run ``relaybatch ARGS`` with a terminal as stdin, stdout and stderr; return what the screen
    received, seconds until its first byte, and the exit code."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_API")}
    environment.update({"TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "40"})
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "relaybatch", *arguments],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=environment,
        start_new_session=True,
    )
    os.close(follower)
    screen, first_byte = bytearray(), None
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: every writer has exited
                break
            if not chunk:
                break
            first_byte = first_byte or time.monotonic() - started
            screen.extend(chunk)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    return ANSI.sub("", screen.decode("utf-8", errors="replace")), first_byte or -1.0, code


def test_the_live_display_of_a_run_at_a_fixed_width(tmp_path: Path) -> None:
    manifest = tmp_path / "screen.yaml"
    manifest.write_text(MANIFEST)

    text, first_byte, code = run_on_a_terminal(
        ["run", str(manifest), "--runs-dir", str(tmp_path / "runs")], 120, tmp_path
    )

    assert code == 0, text
    assert text.startswith(f"relaybatch run: checking {manifest}"), text[:400]
    assert first_byte > 0
    assert re.search(r"chat\s+━+\s+6/6\s+100\.0%", text), text
    assert re.search(r"web_search\s+━+\s+2/2\s+100\.0%", text), text
    assert "finished 8/8 (100.0%) ·" in text
    assert re.search(r"elapsed 0:00:\d\d · \d+\.\d items/s · ETA 0:00:00", text), text
    assert re.search(r"in flight \d+ · queued \d+ · polling 0 · 429s 0 · retries 0 · limit ", text), text
    money = (
        r"spent \$0\.\d{4} · unknown \$0\.0000 · reserved \$0\.0000 · "
        r"projected \$0\.\d{4} · budget \$2\.0000"
    )
    assert re.search(money, text), text
    # Every line of the display fits the terminal: nothing was wrapped by the terminal itself.
    assert max(len(line) for line in text.splitlines()) <= 120
