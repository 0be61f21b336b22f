"""A small fleet against real servers: partitions pulled by two `prefect worker` processes, one
worker and its flow run SIGKILLed mid-partition, the Prefect server restarted, and still every item
billed once and none lost.

A real `prefect server start`, the emulator served by uvicorn (every call 0.5 s, so the kill lands
mid-partition), `relaybatch deploy` (the zombie and re-run automations), two `prefect worker start
--limit 1`, `relaybatch submit`. Everything started here runs in its own process group and is
stopped here, even when an assertion fails.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
import yaml

from tests.flows.test_scheduler import BIN, START_SECONDS, _started, _wait_for
from tests.ports import free_port

pytestmark = pytest.mark.slow

ITEMS, PARTITIONS = 80, 4
REPO = Path(__file__).resolve().parents[2]


def _env(home: Path, api: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PREFECT_", "RELAYBATCH_")) and key != "DO_NOT_TRACK"
    }
    env.update(
        {
            "PREFECT_HOME": str(home),
            "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_UI_ENABLED": "false",
            "PREFECT_LOGGING_TO_API_ENABLED": "false",
        }
    )
    return env


class Fleet:
    """The servers and workers of one test, each stoppable and restartable."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.env = _env(folder / "prefect-home", self.api)
        self.http = httpx.Client(base_url=self.api, timeout=10)
        self.logs: list[Path] = []
        self.stack: dict[str, Any] = {}

    def start(
        self, name: str, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.folder / f"{name}-{len(self.logs)}.log"
        self.logs.append(log)
        context = _started(command, env or self.env, log, self.folder)
        process = context.__enter__()
        self.stack[name] = context
        return process

    def stop(self, name: str) -> None:
        context = self.stack.pop(name)
        context.__exit__(None, None, None)

    def start_server(self) -> None:
        server = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)]
        self.start("server", server)
        _wait_for(
            "the server healthy",
            lambda: self.http.get("/health").status_code == 200,
            START_SECONDS,
            self.logs,
        )

    def flow_runs(self) -> list[dict[str, Any]]:
        return list(self.http.post("/flow_runs/filter", json={}).json())

    def close(self) -> None:
        """Everything stopped as `stop` does (SIGINT, then SIGKILL after 30 s), each tier at once:
        the clients of the servers (workers, submit), then the servers. One by one, the workers'
        graceful exits added up to 20 s."""
        servers = ("server", "emulator")
        for tier in ([name for name in self.stack if name not in servers], [*servers]):
            with ThreadPoolExecutor(max_workers=len(tier) or 1) as pool:
                list(pool.map(self.stop, [name for name in tier if name in self.stack]))
        self.http.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()


def _emulator_config(path: Path) -> Path:
    config = yaml.safe_load((REPO / "configs" / "emulator.yaml").read_text())
    for account in config["accounts"]:
        account["rate_limit_rpm"] = 600
        account["balance_usd"] = "1000.00"
    config.setdefault("faults", {})["rules"] = [{"fault": "latency=0.5", "rate": 1.0}]
    path.write_text(yaml.safe_dump(config))
    return path


def _counts(store: Path) -> dict[str, int]:
    if not store.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return dict(db.execute("select state, count(*) from items group by 1").fetchall())
    except sqlite3.OperationalError:  # a store being created: no tables yet
        return {}


def test_two_workers_a_kill_and_a_server_restart_bill_every_item_once(fleet: Fleet) -> None:
    folder = fleet.folder
    emulator_port = free_port()
    emulator = [str(BIN / "relaybatch"), "emulator", "serve", "--host", "127.0.0.1"]
    emulator += ["--port", str(emulator_port), "--config", str(_emulator_config(folder / "emulator.yaml"))]
    fleet.start("emulator", emulator)
    gateway = f"http://127.0.0.1:{emulator_port}"
    fleet.start_server()
    data = folder / "docs.csv"
    data.write_text("id,prompt\n" + "".join(f"d{n},Summarise document {n}.\n" for n in range(ITEMS)))
    manifest = folder / "fleet.yaml"
    manifest.write_text(
        "run: {name: fleet, rate_limit_rpm: 120}\n"
        "jobs:\n  - {name: docs, kind: chat, model: relay-chat-small, prompt: '{prompt}', data: docs.csv, "
        "carry: [id]}\n"
    )
    config = folder / "deployments.yaml"
    config.write_text(
        f"work_pool: fleet\ndeployments:\n  - name: partition\n    flow: run-manifest\n"
        f"    parameters:\n      manifest: {manifest}\n"
    )
    runs = folder / "runs"
    deploy = subprocess.run(
        [str(BIN / "relaybatch"), "deploy", "--config", str(config), "--silent-after", "75"],
        env=fleet.env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    assert "automation: relaybatch: re-run crashed partitions" in deploy.stdout
    workers = {
        **fleet.env,
        "PREFECT_HOME": str(folder / "worker-home"),
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
        "PREFECT_WORKER_QUERY_SECONDS": "2",
        "RELAYBATCH_BASE_URL": gateway,
        "RELAYBATCH_API_KEY": "rb-demo-key",
    }
    # --type: a worker restarted while the server is down starts anyway (it cannot look the pool up).
    worker = [str(BIN / "prefect"), "worker", "start", "--pool", "fleet", "--limit", "1", "--type", "process"]
    processes = {name: fleet.start(name, [*worker, "--name", name], workers) for name in ("w1", "w2")}
    # Submitted and followed to the end (--wait): it also schedules again a partition it sees
    # Crashed, which the automation misses when the Crashed event comes as the server restarts.
    submit = [str(BIN / "relaybatch"), "submit", str(manifest), "--partitions", str(PARTITIONS)]
    submitting = fleet.start("submit", [*submit, "--runs-dir", str(runs), "--wait"])

    def partition_under_way() -> dict[str, Any] | None:
        for run in fleet.flow_runs():
            index, count = run["parameters"]["partition"].split("/")
            store = runs / "fleet" / "shards" / f"part-{index}-of-{count}" / "checkpoint.sqlite"
            if (
                run["state_type"] == "RUNNING"
                and run["infrastructure_pid"]
                and _counts(store).get("done", 0) >= 3
            ):
                return run
        return None

    victim = _wait_for("a partition under way", partition_under_way, 400, fleet.logs)
    flow_pid = int(victim["infrastructure_pid"])
    owner = next(name for name, process in processes.items() if _parent(flow_pid) == process.pid)
    os.kill(flow_pid, signal.SIGKILL)  # the flow run's process, then its worker, as a machine dies
    os.killpg(processes[owner].pid, signal.SIGKILL)
    fleet.stop(owner)
    fleet.start(owner, [*worker, "--name", owner], workers)  # the machine comes back

    fleet.stop("server")  # the server restarts while the other partitions run
    fleet.start_server()

    _wait_for("submit --wait to end", lambda: submitting.poll() is not None, 900, fleet.logs)
    output = next(log for log in fleet.logs if log.name.startswith("submit"))
    assert submitting.returncode == 0, output.read_text()[-3000:]
    assert "results:" in output.read_text()  # merged
    states = [run["state_type"] for run in fleet.flow_runs()]
    assert states == ["COMPLETED"] * PARTITIONS, states

    counts = _counts(runs / "fleet" / "checkpoint.sqlite")
    assert counts.get("done", 0) + counts.get("uncertain", 0) == ITEMS, counts  # nothing lost
    assert counts.get("uncertain", 0) <= 16  # at most what was in flight at the kill
    table = pq.read_table(runs / "fleet" / "results" / "docs.parquet", columns=["item_id"])
    assert len(set(table.column("item_id").to_pylist())) == table.num_rows == ITEMS  # one row per item
    ledger = httpx.get(f"{gateway}/_emulator/ledger", timeout=10).json()
    charged = collections.Counter(charge["body_hash"] for charge in ledger["charges"])
    assert max(charged.values()) == 1, json.dumps(charged)  # none billed twice
    assert counts["done"] <= len(charged) <= ITEMS  # the uncertain ones may have reached it, once


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
