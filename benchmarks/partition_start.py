"""A partition flow run's start: seconds from its Running state to its first request (issue 29).

The fleet benchmark (fleet.py) reports this figure among many, after a whole run; this one gives
it alone, in minutes. It starts a real `prefect server start` and the emulator (`relaybatch
emulator serve`, every call --latency s), `relaybatch deploy`s the run-manifest flow, and
`relaybatch submit`s a manifest of --partitions x --rows chat items (no worker: the flow runs
stay scheduled). Then it runs each partition's flow run as a process worker does
(`python -m prefect.engine`, PREFECT__FLOW_RUN_ID), one at a time, and stops it (SIGTERM: a clean
stop) once its first request has reached the gateway. With --resume, each partition is then run
again (a resumed partition: its store exists). The figure is the time from the flow run's Running
state (when the Prefect engine starts it, what fleet.py measures) to the first POST the emulator
logged, with its ratio to the 5 s goal; the time from the process's spawn to its Running state is
shown beside it (the interpreter, Prefect and the flow's imports, before Prefect starts the run).

    .venv/bin/python benchmarks/partition_start.py                       # 3 partitions of 5,000 rows
    .venv/bin/python benchmarks/partition_start.py --profile DIR         # a cProfile file per start

--together starts the partitions' processes at once (as workers that free up together do).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import fleet
import httpx
from fleet import say
from ports import free_port

from relaybatch.run_folder import partition_folder_name

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY = "rb-demo-key"
GOAL_SECONDS = 5.0


def wait_for(what: str, check: Any, seconds: float) -> Any:
    return fleet.wait_for(what, check, seconds, every=0.1)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    fleet.stop_group(process, grace=60)


def write_inputs(folder: Path, partitions: int, rows: int) -> Path:
    with open(folder / "docs.csv", "w") as handle:
        handle.write("id,prompt\n")
        for n in range(partitions * rows):
            handle.write(f"d{n},Summarise document {n} in one line.\n")
    manifest = folder / "start.yaml"
    manifest.write_text(
        "run: {name: start}\njobs:\n"
        "  - {name: docs, kind: chat, model: relay-chat-small, prompt: '{prompt}', data: docs.csv,\n"
        "     carry: [id]}\n"
    )
    return manifest


def emulator_config(path: Path, latency: float) -> Path:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "configs" / "emulator.yaml").read_text())
    for account in config["accounts"]:
        if account["name"] == "demo":
            account["balance_usd"] = "1000000.00"
    config.setdefault("faults", {})["rules"] = [{"fault": f"latency={latency}", "rate": 1.0}]
    path.write_text(yaml.safe_dump(config))
    return path


def running_at(http: httpx.Client, flow_run_id: str) -> list[float]:
    states = http.get("/flow_run_states/", params={"flow_run_id": flow_run_id}).json()
    return sorted(
        datetime.fromisoformat(state["timestamp"]).timestamp()
        for state in states
        if state["type"] == "RUNNING"
    )


def body_hashes(store: Path) -> set[str]:
    """The body hash of every request the partition's store holds (none before its plan is in)."""
    from fleet import body_hash

    if not store.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            rows = db.execute("select request from items").fetchall()
    except sqlite3.Error:  # not made yet
        return set()
    return {body_hash("docs", request) for (request,) in rows}


def first_request(
    http: httpx.Client, gateway: httpx.Client, flow_run_id: str, spawn: float, store: Path
) -> tuple[float, float]:
    """When the flow run (its process spawned at ``spawn``) went Running, and the first POST of
    one of its items (told apart by body hash, as fleet.py does) the gateway logged after that."""
    began = wait_for(
        "its Running state", lambda: [t for t in running_at(http, flow_run_id) if t > spawn - 1], 300
    )[-1]
    hashes = wait_for("its plan", lambda: body_hashes(store), 300)

    def first() -> float | None:
        log = gateway.get("/_emulator/requests", params={"since": began, "distinct": "false"}).json()
        mine = [e["at"] for e in log["recent"] if e["method"] == "POST" and e["body_hash"] in hashes]
        return min(mine, default=None)

    return began, wait_for("its first request", first, 300)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rows", type=int, default=5000, help="rows per partition (the issue: 60,000 / 12)")
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--resume", action="store_true", help="then run each partition again (resumed)")
    parser.add_argument("--together", action="store_true", help="start every partition's process at once")
    parser.add_argument("--profile", type=Path, default=None, help="write a cProfile file per start here")
    parser.add_argument(
        "--wrapper", type=Path, default=None, help="run each flow run as `python WRAPPER` (a tracer)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="partition-start-"))
    say(f"scratch folder {folder}")
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(folder / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True
            )
        started.append(process)
        return process

    try:
        port, emulator_port = free_port(), free_port()
        api, gateway_url = f"http://127.0.0.1:{port}/api", f"http://127.0.0.1:{emulator_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
        env.update(
            {
                "PREFECT_HOME": str(folder / "prefect-home"),
                "PREFECT_API_URL": api,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "DO_NOT_TRACK": "1",
                "PREFECT_SERVER_UI_ENABLED": "false",
                "PREFECT_LOGGING_TO_API_ENABLED": "false",
                "RELAYBATCH_BASE_URL": gateway_url,
                "RELAYBATCH_API_KEY": KEY,
            }
        )
        config = emulator_config(folder / "emulator.yaml", options.latency)
        start("emulator", [str(BIN / "relaybatch"), "emulator", "serve", "--port", str(emulator_port),
                           "--config", str(config)], env)  # fmt: skip
        start(
            "server",
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env,
        )
        http, gateway = httpx.Client(base_url=api, timeout=30), httpx.Client(base_url=gateway_url, timeout=30)
        wait_for("the Prefect server", lambda: http.get("/health").status_code == 200, 600)
        wait_for("the emulator", lambda: gateway.get("/_emulator/clock").status_code == 200, 60)
        manifest = write_inputs(folder, options.partitions, options.rows)
        (folder / "deployments.yaml").write_text(
            f"work_pool: start\ndeployments:\n  - name: partition\n    flow: run-manifest\n"
            f"    parameters:\n      manifest: {manifest}\n"
        )
        for command in (
            ["deploy", "--config", str(folder / "deployments.yaml")],
            [
                "submit",
                str(manifest),
                "--partitions",
                str(options.partitions),
                "--runs-dir",
                str(folder / "runs"),
            ],
        ):
            done = subprocess.run(
                [str(BIN / "relaybatch"), *command],
                env=env,
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                raise SystemExit(f"relaybatch {command[0]} failed:\n{done.stdout}{done.stderr}")
        runs = sorted(
            http.post("/flow_runs/filter", json={"limit": 200}).json(),
            key=lambda run: run["parameters"]["partition"],
        )
        say(f"server, emulator, deployment and {len(runs)} partitions submitted")
        rounds = ["new", "resumed"] if options.resume else ["new"]
        figures: dict[str, list[tuple[str, float, float]]] = {kind: [] for kind in rounds}
        for kind in rounds:
            batches = [runs] if options.together else [[run] for run in runs]
            for batch in batches:
                spawned: dict[str, tuple[float, subprocess.Popen[bytes]]] = {}
                for run in batch:
                    partition = run["parameters"]["partition"]
                    command = [sys.executable]
                    if options.profile is not None:
                        options.profile.mkdir(parents=True, exist_ok=True)
                        out = options.profile / f"{kind}-{partition.replace('/', '-of-')}.prof"
                        command += ["-m", "cProfile", "-o", str(out)]
                    command += [str(options.wrapper)] if options.wrapper else ["-m", "prefect.engine"]
                    spawned[run["id"]] = (
                        time.time(),
                        start(f"flow-run-{kind}", command, {**env, "PREFECT__FLOW_RUN_ID": run["id"]}),
                    )
                for run in batch:
                    partition = run["parameters"]["partition"]
                    spawn = spawned[run["id"]][0]
                    store = (
                        folder
                        / "runs"
                        / "start"
                        / "shards"
                        / partition_folder_name(*map(int, partition.split("/")))
                    )
                    began, first = first_request(http, gateway, run["id"], spawn, store / "checkpoint.sqlite")
                    figures[kind].append((partition, began - spawn, first - began))
                    say(f"{kind} partition {partition}: spawn -> Running {began - spawn:.2f} s, "
                        f"Running -> first request {first - began:.2f} s")  # fmt: skip
                for _, process in spawned.values():
                    stop_group(process)
                    started.remove(process)
        print()
        for kind, rows in figures.items():
            seconds = [figure for _, _, figure in rows]
            spawns = [spawn for _, spawn, _ in rows]
            together = ", together" if options.together else ""
            print(
                f"{kind} partitions ({options.rows} rows each, {len(rows)} starts{together}): "
                f"Running -> first request max {max(seconds):.2f} s "
                f"({max(seconds) / GOAL_SECONDS:.2f}x of {GOAL_SECONDS:.0f} s), "
                f"median {statistics.median(seconds):.2f} s; "
                f"spawn -> Running median {statistics.median(spawns):.2f} s"
            )
    finally:
        for process in reversed(started):
            stop_group(process)
        if not options.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
