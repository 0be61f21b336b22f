"""A real `relaybatch emulator serve` process for tests: started on a free port, always stopped."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

BANNER_END = "  Ctrl-C stops."
START_TIMEOUT_SECONDS = 60.0


@dataclass
class Served:
    url: str
    banner: list[str]
    process: subprocess.Popen[str]
    stderr: str = ""  # filled in when the process has stopped


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    """This process's environment without any RELAYBATCH_EMULATOR_* setting, plus ``extra``."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("RELAYBATCH_EMULATOR_")}
    return {**clean, **(extra or {})}


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "relaybatch", "emulator", "serve", *args]


def _read_banner(process: subprocess.Popen[str], reader: list[threading.Thread]) -> list[str]:
    """The lines printed at start, up to and including the last; fails if the process ends first.

    A thread reads stdout (a pipe with no timeout of its own) until the process closes it.
    """
    assert process.stdout is not None
    stdout = process.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        with stdout:
            for line in stdout:
                lines.put(line.rstrip("\n"))
        lines.put(None)

    reader.append(threading.Thread(target=pump, daemon=True))
    reader[0].start()
    seen: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            process.wait(timeout=15)
            stderr = process.stderr.read() if process.stderr is not None else ""
            raise AssertionError(f"emulator serve ended at start ({process.returncode}): {seen} {stderr}")
        seen.append(line)
        if line == BANNER_END:
            return seen
    raise AssertionError(f"emulator serve printed no full banner in {START_TIMEOUT_SECONDS} s: {seen}")


def stop(process: subprocess.Popen[str]) -> str:
    """Ctrl-C (SIGINT), as a user stops it; SIGKILL if it does not end within 15 s. Returns stderr."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    stderr = process.stderr.read() if process.stderr is not None else ""
    if process.stderr is not None:
        process.stderr.close()
    return stderr


@contextmanager
def served_emulator(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """`relaybatch emulator serve --port 0 ARGS` until the block ends; the URL comes from its banner."""
    process = subprocess.Popen(
        _command("--port", "0", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(env),
    )
    reader: list[threading.Thread] = []
    try:
        banner = _read_banner(process, reader)
        url = banner[0].rsplit(" ", 1)[-1]
        served = Served(url, banner, process)
        yield served
    finally:
        stderr = stop(process)
        for thread in reader:
            thread.join(timeout=15)
    served.stderr = stderr


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`relaybatch emulator serve ARGS` expected to end by itself (a refusal)."""
    return subprocess.run(_command(*args), capture_output=True, text=True, timeout=60, env=_environment(env))
