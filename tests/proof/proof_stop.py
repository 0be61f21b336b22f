"""Stops and kills of `relaybatch run` at the rate limit, counted on the gateway's side.

Shared by tests/proof/test_stop_at_the_limit.py and benchmarks/stop_at_the_limit.py. The emulator
is served in the driver's process behind ``WireRecorder`` (proof_served.py), which records every
request that reaches it and when; the runner is the real command line in a subprocess, stopped
with SIGINT or SIGTERM or killed with SIGKILL. Every item's prompt carries a marker (``[item 007]``),
so a request on the wire names its item:

- a **phantom** is an item the run left ``sending`` or ``uncertain`` ("may have been billed")
  whose create never reached the gateway;
- **late requests** are those whose head reached the gateway more than ``LATE_SECONDS`` after
  the signal (the driver and the gateway share ``time.monotonic``: one machine).
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from proof_served import PYTHON, Served, runner_environment

STANDARD_KEY = "rb-standard-key"  # the shipped emulator's 120 requests a minute
UNLIMITED_KEY = "rb-demo-key"
LATE_SECONDS = 0.5
CREATE_PATHS = {"chat": "/v1/chat/completions", "video": "/v2/videos"}
RUN_NAME = "at-the-limit"
EXIT_TIMEOUT_SECONDS = 120
RESUME_TIMEOUT_SECONDS = 1800


def marker(number: int) -> str:
    return f"[item {number:03d}]"


def manifest(
    folder: Path,
    kind: str,
    count: int,
    concurrency: int = 16,
    *,
    expected_render_seconds: float | None = None,
) -> Path:
    """``count`` chat or V2 video items, each prompt marked with its number; a video job's renders
    are expected to take ``expected_render_seconds`` (None: the default guess, 50 s for 4 s videos),
    which times their first polls (relaybatch/engine/poll_plan.py)."""
    if kind == "chat":
        job: dict[str, Any] = {
            "name": "asks",
            "kind": "chat",
            "model": "relay-chat-small",
            "request": {"max_tokens": 16},
            "prompt": "{marker} Say hello.",
        }
    else:
        job = {
            "name": "clips",
            "kind": "video",
            "model": "relay-video-2",
            "request": {"seconds": "4", "size": "1280x720"},
            "prompt": "{marker} A slow pan across a forest",
        }
        if expected_render_seconds is not None:
            job["video"] = {"expected_render_seconds": expected_render_seconds}
    job["items"] = [{"id": f"i{n:03d}", "marker": marker(n)} for n in range(count)]
    data = {"run": {"name": RUN_NAME, "concurrency": concurrency, "uncertain": "report"}, "jobs": [job]}
    path = folder / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def environment(home: Path, served: Served, api_key: str) -> dict[str, str]:
    return runner_environment(
        home, api_key=api_key, base_url=served.url, RELAYBATCH_PROGRESS_EVERY_SECONDS="60"
    )


def start(manifest_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "relaybatch", "run", str(manifest_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = EXIT_TIMEOUT_SECONDS) -> tuple[int, str]:
    """Wait for the process (killed if it outlives the timeout); its exit code and output."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out + err


def creates(served: Served, kind: str, since: float = 0.0) -> list[Any]:
    return [
        exchange
        for exchange in list(served.recorder.arrivals)
        if exchange.method == "POST" and exchange.target == CREATE_PATHS[kind] and exchange.arrived >= since
    ]


def wait_for_creates(served: Served, kind: str, count: int, since: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(creates(served, kind, since)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the gateway received fewer than {count} creates in {timeout} s")
        time.sleep(0.01)


def states(run_dir: Path) -> dict[str, str]:
    """State per item id, read-only."""
    path = run_dir / "checkpoint.sqlite"
    if not path.exists():
        return {}
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return dict(connection.execute("select item_id, state from items").fetchall())
    finally:
        connection.close()


def received_items(served: Served, kind: str) -> Counter[str]:
    """How many creates of each item id reached the gateway (by the marker in its body)."""
    seen: Counter[str] = Counter()
    for exchange in creates(served, kind):
        text = exchange.body.decode("utf-8", "replace")
        start = text.find("[item ")
        if start >= 0:
            seen[f"i{text[start + 6 : start + 9]}"] += 1
    return seen


def phantoms(run_dir: Path, served: Served, kind: str) -> list[str]:
    """Items left as maybe billed whose create never reached the gateway."""
    reached = received_items(served, kind)
    maybe_billed = {"sending", "uncertain"}
    left = states(run_dir)
    return sorted(item for item, state in left.items() if state in maybe_billed and not reached[item])


@dataclass
class Stop:
    """One SIGINT or SIGTERM: what reached the gateway after it, how long the exit took."""

    signal_name: str
    exit_code: int
    seconds_to_exit: float
    late_requests: int
    after_signal: int  # requests whose head arrived after the signal at all (in flight: < 0.5 s)
    states: Counter[str]
    output: str


def stop_once(
    manifest_path: Path,
    run_dir: Path,
    served: Served,
    env: dict[str, str],
    kind: str,
    *,
    signum: int,
    after: int,
    again_after: float | None = None,
) -> Stop:
    """Start the run, send ``signum`` once the gateway has received ``after`` creates of it (and
    a second SIGINT ``again_after`` seconds later: the stop at once)."""
    started = time.monotonic()
    process = start(manifest_path, env)
    try:
        wait_for_creates(served, kind, after, started)
        signalled = time.monotonic()
        process.send_signal(signum)
        if again_after is not None:
            time.sleep(again_after)
            process.send_signal(signal.SIGINT)
        code, output = finish(process)
        exited = time.monotonic()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    time.sleep(0.2)  # a request the process wrote just before it ended reaches the server
    arrived = [e.arrived for e in list(served.recorder.arrivals)]
    return Stop(
        signal.Signals(signum).name,
        code,
        exited - signalled,
        sum(1 for moment in arrived if moment > signalled + LATE_SECONDS),
        sum(1 for moment in arrived if moment > signalled),
        Counter(states(run_dir).values()),
        output,
    )


@dataclass
class Kills:
    """A kill campaign: the phantoms each kill made, and the run's end."""

    phantoms_per_kill: list[int] = field(default_factory=list)
    sending_per_kill: list[int] = field(default_factory=list)
    final_states: Counter[str] = field(default_factory=Counter)
    final_phantoms: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    resume_code: int = -1


def kill_campaign(
    manifest_path: Path,
    run_dir: Path,
    served: Served,
    env: dict[str, str],
    kind: str,
    *,
    kills: int,
    seed: int,
    longest_delay: float,
    before_resume: Callable[[], None] | None = None,
) -> Kills:
    """SIGKILL the run ``kills`` times, each a seeded random time after its first request reached
    the gateway; after each kill, count the phantoms; then (``before_resume`` called first, if
    given) run it to the end."""
    rng, result, seen = random.Random(seed), Kills(), set[str]()
    for _ in range(kills):
        started = time.monotonic()
        process = start(manifest_path, env)
        try:
            wait_for_first_request(served, started, process)
            if process.poll() is None:
                time.sleep(rng.uniform(0.0, longest_delay))
                process.send_signal(signal.SIGKILL)
            finish(process)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        time.sleep(0.2)  # what the process wrote before it died reaches the server
        left = states(run_dir)
        result.sending_per_kill.append(sum(1 for state in left.values() if state == "sending"))
        now = set(phantoms(run_dir, served, kind))
        result.phantoms_per_kill.append(len(now - seen))  # new at this kill
        seen |= now
        if all(state == "done" for state in left.values()):
            break
    if before_resume is not None:
        before_resume()
    # To the end: at 120 rpm the videos' polls share the limit, so this takes minutes at full size.
    result.resume_code, _ = finish(start(manifest_path, env), timeout=RESUME_TIMEOUT_SECONDS)
    result.final_states = Counter(states(run_dir).values())
    result.final_phantoms = phantoms(run_dir, served, kind)
    result.twice = sorted(item for item, count in received_items(served, kind).items() if count > 1)
    return result


def wait_for_first_request(served: Served, since: float, process: subprocess.Popen[str]) -> None:
    """Until a request of this process reached the gateway (or the process ended)."""
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        if any(e.arrived >= since for e in list(served.recorder.arrivals)):
            return
        time.sleep(0.01)


def summary_line(stop: Stop) -> str:
    return json.dumps(
        {
            "signal": stop.signal_name,
            "exit": stop.exit_code,
            "seconds_to_exit": round(stop.seconds_to_exit, 2),
            "late_requests": stop.late_requests,
            "states": dict(stop.states),
        }
    )
