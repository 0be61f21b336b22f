"""How soon a person at a terminal sees something after typing `relaybatch run` (issue 17).

`relaybatch run` of a small manifest (embedded emulator, no Prefect server) on a pseudo-terminal,
N times; the medians of:

- first byte: process start to the first byte on the screen (target: under 1 s);
- first progress display: process start to the live table's first frame (its header);
- whole run: process start to exit.

    .venv/bin/python benchmarks/first_output.py [--repeat 5]

Timing figures on a loaded machine are noisy: run it on a quiet one for the figures you keep.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

TARGET_SECONDS = 1.0
MANIFEST = """\
jobs:
  - {name: ask, kind: chat, model: relay-chat-small, request: {max_tokens: 16}, prompt: "{q}",
     items: [{q: one}, {q: two}, {q: three}, {q: four}]}
"""


def one_run(folder: Path) -> tuple[float, float, float]:
    manifest = folder / "first.yaml"
    manifest.write_text(MANIFEST)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "RELAYBATCH_"))}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "relaybatch", "run", str(manifest), "--runs-dir", str(folder / "runs")],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    screen, first_byte, first_frame = b"", None, None
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        now = time.monotonic() - started
        first_byte = first_byte if first_byte is not None else now
        screen += chunk
        if first_frame is None and b"finished/total" in screen:  # the live table's header
            first_frame = now
    process.wait()
    os.close(leader)
    ended = time.monotonic() - started
    return first_byte or ended, first_frame or ended, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    arguments = parser.parse_args()
    figures = []
    for _ in range(arguments.repeat):
        with tempfile.TemporaryDirectory() as folder:
            figures.append(one_run(Path(folder)))
    first_byte, first_frame, whole = (statistics.median(column) for column in zip(*figures, strict=True))
    print(
        f"first byte on the screen: {first_byte:.2f} s (target {TARGET_SECONDS:.0f} s, ratio "
        f"{first_byte / TARGET_SECONDS:.2f})"
    )
    print(f"first progress display:   {first_frame:.2f} s")
    print(f"whole run (4 chat items): {whole:.2f} s")
    print(f"medians of {arguments.repeat} runs")


if __name__ == "__main__":
    main()
