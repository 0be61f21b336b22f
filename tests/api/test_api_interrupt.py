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
import asyncio, os, signal, sys, threading, time
import pyarrow as pa
import relaybatch
from relaybatch.engine import CheckpointStore

# A kernel's SIGINT raises KeyboardInterrupt. A process started from a shell's background job
# inherits SIGINT ignored, and Python then leaves it ignored: the interrupt would never come.
signal.signal(signal.SIGINT, signal.default_int_handler)

def interrupt_when_done(checkpoint):
    while True:
        time.sleep(0.1)
        try:
            with CheckpointStore.open_read_only(checkpoint) as store:
                done = store.count_by_state().get("done", 0)
        except Exception:  # not made yet, or its tables are being created
            continue
        if done >= 2:
            os.kill(os.getpid(), signal.SIGINT)
            return

async def cell():
    job = relaybatch.Job(kind="chat", model="relay-chat-small", prompt="{text}")
    table = pa.table({"text": [f"row {n}" for n in range(int(sys.argv[2]))]})
    run = relaybatch.Run.from_table(table, job, name="slow", runs_dir=sys.argv[1], concurrency=2)
    if sys.argv[3] == "interrupt":  # once some rows are done, however slow the machine is
        threading.Thread(target=interrupt_when_done, args=(run.paths.checkpoint,), daemon=True).start()
    outcome = run.run(progress=False)
    print("outcome", outcome.interrupted, outcome.counts.get("done", 0), outcome.sent, flush=True)

asyncio.new_event_loop().run_until_complete(cell())
"""


@pytest.mark.slow
def test_a_kernel_interrupt_stops_cleanly_and_a_rerun_resumes(tmp_path: Path) -> None:
    # Every chat call takes 0.3 s: 200 calls, 2 in flight, about 30 s, so the interrupt after two
    # answers lands long before the end however loaded the machine; the rerun is at full speed.
    slow = tmp_path / "slow.yaml"
    rule = '{fault: "latency=0.3", paths: ["/v1/chat/completions"], every: 1}'
    slow.write_text(DEFAULT_CONFIG_PATH.read_text().replace("rules: []", f"rules: [{rule}]"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}

    def cell(argument: str, config: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", CELL, str(tmp_path / "runs"), "200", argument]
        env["RELAYBATCH_EMULATOR_CONFIG"] = str(config)
        return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)

    stopped = cell("interrupt", slow)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopping (SIGINT): no new requests" in stopped.stderr
    _, signal_name, done, sent = stopped.stdout.split()
    assert signal_name == "SIGINT" and 0 < int(done) < 200 and int(sent) == int(done)

    resumed = cell("run", DEFAULT_CONFIG_PATH)
    assert resumed.returncode == 0, resumed.stderr
    _, signal_name, done_after, sent_after = resumed.stdout.split()
    assert signal_name == "None" and int(done_after) == 200 and int(sent_after) == 200 - int(done)


async def test_a_ctrl_c_while_the_execution_starts_is_acted_on_once_it_can_stop() -> None:
    import asyncio
    import contextlib

    from relaybatch.run.stopping import InterruptRelay, stop_on_signals

    relay = InterruptRelay()
    assert relay.interrupt() is False  # the cell's thread caught it before the engine was ready
    stop = asyncio.Event()
    work = asyncio.ensure_future(asyncio.sleep(30))
    said: list[str] = []
    with stop_on_signals(stop, work, say=said.append, grace=30, relay=relay) as signalled:
        await asyncio.sleep(0)
        assert stop.is_set() and signalled.signal == "SIGINT"
        assert relay.interrupt() is True  # the second: at once
        await asyncio.sleep(0)
        assert signalled.forced
        with contextlib.suppress(asyncio.CancelledError):
            await work
        assert work.cancelled()
    assert said and said[0].startswith("stopping (SIGINT)")
