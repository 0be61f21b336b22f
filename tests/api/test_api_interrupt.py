"""A kernel interrupt stops a run started from a notebook as Ctrl-C stops `relaybatch run`: the first
one cleanly (requests in flight finish and are checkpointed), and running it again resumes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from relaybatch.emulator.config import DEFAULT_CONFIG_PATH

# A notebook cell, as ipykernel runs it: inside a running event loop whose thread gets the
# KeyboardInterrupt of a kernel interrupt (run_until_complete installs no SIGINT handler of its own).
CELL = """
import asyncio, os, signal, sys, threading
import pyarrow as pa
import relaybatch

async def cell():
    job = relaybatch.Job(kind="chat", model="relay-chat-small", prompt="{text}")
    table = pa.table({"text": [f"row {n}" for n in range(int(sys.argv[2]))]})
    run = relaybatch.Run.from_table(table, job, name="slow", runs_dir=sys.argv[1], concurrency=2)
    if sys.argv[3] == "interrupt":
        threading.Timer(float(sys.argv[4]), os.kill, (os.getpid(), signal.SIGINT)).start()
    outcome = run.run(progress=False)
    print("outcome", outcome.interrupted, outcome.counts.get("done", 0), outcome.sent, flush=True)

asyncio.new_event_loop().run_until_complete(cell())
"""


@pytest.mark.slow
def test_a_kernel_interrupt_stops_cleanly_and_a_rerun_resumes(tmp_path: Path) -> None:
    slow = tmp_path / "slow.yaml"  # every chat call takes 0.3 s: 40 calls, 2 in flight, about 6 s
    rule = '{fault: "latency=0.3", paths: ["/v1/chat/completions"], every: 1}'
    slow.write_text(DEFAULT_CONFIG_PATH.read_text().replace("rules: []", f"rules: [{rule}]"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
    env["RELAYBATCH_EMULATOR_CONFIG"] = str(slow)

    def cell(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", CELL, str(tmp_path / "runs"), "40", *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

    stopped = cell("interrupt", "3")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopping (SIGINT): no new requests" in stopped.stderr
    _, signal_name, done, sent = stopped.stdout.split()
    assert signal_name == "SIGINT" and 0 < int(done) < 40 and int(sent) == int(done)

    resumed = cell("run")
    assert resumed.returncode == 0, resumed.stderr
    _, signal_name, done_after, sent_after = resumed.stdout.split()
    assert signal_name == "None" and int(done_after) == 40 and int(sent_after) == 40 - int(done)
