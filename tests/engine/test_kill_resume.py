"""A real crash: the runner process is killed (SIGKILL) mid-run, then the run resumes.

The emulator is served by uvicorn in its own process, so its request log outlives the runner
and counts every billed create it received. No item may be lost and no create sent twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from engine_fakes import FAST, FAST_MEDIA
from engine_items import chat, video, video_v1
from pydantic import SecretStr

from relaybatch.emulator.config import DEFAULT_CONFIG_PATH
from relaybatch.engine import TERMINAL_STATES, CheckpointStore, execute
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY
from tests.ports import free_port

ITEMS = [chat(n) for n in range(60)] + [video(n) for n in range(6)] + [video_v1(n) for n in range(4)]

# The child runs the engine slowly enough (latency on every request) to be killed mid-way.
RUNNER = """
import asyncio, sys
from pathlib import Path
from pydantic import SecretStr
from relaybatch.engine import CheckpointStore, EngineSettings, PollSettings, execute
from relaybatch.gateway import GatewayClient

async def main():
    store = CheckpointStore(Path(sys.argv[1]))
    settings = EngineSettings(concurrency=4, poll=PollSettings(initial_seconds=0.05, max_seconds=0.1))
    slow = {"x-emulator-fault": "latency=0.05"}
    async with GatewayClient(sys.argv[2], SecretStr(sys.argv[3]), headers=slow) as client:
        await execute(store, client, settings=settings)

asyncio.run(main())
"""


@pytest.fixture
def served_emulator(tmp_path: Path) -> Iterator[str]:
    config = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    config["media"] = FAST_MEDIA
    config_path = tmp_path / "emulator.yaml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relaybatch",
            "emulator",
            "serve",
            "--port",
            str(port),
            "--config",
            str(config_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{base_url}/_emulator/requests", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield base_url
    finally:
        server.terminate()
        server.wait(timeout=10)


def done_count(checkpoint: Path) -> int:
    try:
        with sqlite3.connect(checkpoint) as connection:
            return int(
                connection.execute("select count(*) from items where state != 'pending'").fetchone()[0]
            )
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("kill_after", [15])
async def test_killed_runner_resumes_without_loss_or_double_billing(
    tmp_path: Path, served_emulator: str, kill_after: int
) -> None:
    checkpoint = tmp_path / "run" / "checkpoint.sqlite"
    store = CheckpointStore(checkpoint)
    store.add_items(ITEMS)
    store.close()

    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(checkpoint), served_emulator, EMULATOR_DEMO_KEY]
    )
    try:
        deadline = time.monotonic() + 60
        while done_count(checkpoint) < kill_after and runner.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert runner.poll() is None, "the runner finished before it could be killed"
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(timeout=10)

    store = CheckpointStore(checkpoint)
    try:
        async with GatewayClient(
            served_emulator, SecretStr(EMULATOR_DEMO_KEY), retry=RetryPolicy(max_attempts=1)
        ) as client:
            summary = await execute(store, client, settings=FAST)
        states = [row["state"] for row in store.iter_items()]
    finally:
        store.close()

    log = httpx.get(f"{served_emulator}/_emulator/requests", timeout=5).json()
    creates = [entry for entry in log["distinct"] if entry["method"] == "POST"]
    assert len(states) == len(ITEMS) and set(states) <= TERMINAL_STATES  # nothing lost
    assert all(entry["count"] == 1 for entry in creates), json.dumps(creates)  # nothing paid twice
    assert summary.counts.get("done", 0) + summary.counts.get("uncertain", 0) == len(ITEMS)
