"""A fleet under kills: partitions pulled by Prefect workers, one limit, nothing billed twice.

Starts a real `prefect server start` and the emulator (`relaybatch emulator serve`: the account
limited to --rpm, every call --latency s, V2 videos rendering 15 s per second of video, so 4/8/12 s
videos take 60/120/180 s, at most --cap queued or rendering), `relaybatch deploy`, --workers
`prefect worker start --limit 1`, then `relaybatch submit MANIFEST --partitions N --wait` of
--items chat items and --videos videos (--videos-first: the video job first in the manifest). At
--kill-at of the work done it SIGKILLs one worker and its flow-run process, and starts the worker
again --back-after seconds later (the machine comes back); at --restart-at it restarts the Prefect
server. Everything started here runs in its own process group and is
stopped here. The Prefect server keeps its database in SQLite, as `prefect server start` does by
default, or with --postgres in a throwaway PostgreSQL cluster (Prefect's advice beyond a light
single machine; needs PostgreSQL >= 14.9: apt-get install postgresql). The processes' notes that
the server did not answer are counted: billed sends wait while it does not.

Goals (issue 29), each printed with its ratio to the goal: share of the limit used while two or
more workers send >= 97 %; arrivals in the worst 60 s window <= the limit; 429s after the first
minute 0; renders in flight at every sample <= the cap; bodies billed twice 0; items lost 0; the
run's ledger equal to the emulator's bill to the cent; with --budget-usd, the bill never above the
budget; seconds from the kill to the killed partition's first resumed request <= 150; each
partition's first request within 5 s of its flow run starting; planning time per partition against
its rows; worker peak RSS <= 250 MB.

    .venv/bin/python benchmarks/fleet.py                                   # the issue's size (~80 min)
    .venv/bin/python benchmarks/fleet.py --items 3000 --videos 24 --partitions 6   # about 10 minutes
    .venv/bin/python benchmarks/fleet.py --items 1200 --videos 12 --partitions 4 --videos-first \
        --budget-usd 5.78                                                  # a budget of 60 % of the bill

Requests are told apart by partition after the run: each item's request body, as the client
serialises it, hashes to the body hash the emulator logged (printed: POST bodies not told apart),
and a video's polls name its id.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import csv
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from ports import free_port
from shared_limit import max_in_window

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY = "rb-demo-key"
CHAT_MODEL, VIDEO_MODEL = "relay-chat-small", "relay-video-2"
LENGTHS = ("4", "8", "12")
RENDER_SECONDS_PER_VIDEO_SECOND = 15.0  # 4/8/12 s videos render in 60/120/180 s
WINDOW = 60.0
BUCKET = 5.0
SAMPLE_SECONDS = 2.0
SETTLED_AFTER = 15.0  # a logged request's status is read once it is this old
GOALS = {
    "share": 0.97,
    "resume_seconds": 150.0,
    "first_request_seconds": 5.0,
    "rss_mb": 250.0,
}


# -- processes -------------------------------------------------------------------------------


def postgres_bin() -> Path:
    """The PostgreSQL server programs (Debian's postgresql package puts them here)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise SystemExit("--postgres needs PostgreSQL >= 14.9 (apt-get install postgresql)")
    return found[-1].parent


@contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the Prefect server's database (Prefect's advice for more
    than a light single machine): its connection URL. As root, the cluster runs as ``postgres``
    (initdb refuses root)."""
    tools = postgres_bin()
    data = Path(tempfile.mkdtemp(prefix="fleet-pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        import shutil

        shutil.chown(data, "postgres", "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_owner, *command], check=True, capture_output=True, cwd=data)

    run(str(tools / "initdb"), "-D", str(data / "db"), "-U", "prefect", "--auth=trust")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200"
    run(str(tools / "pg_ctl"), "-D", str(data / "db"), "-o", options, "-l", str(data / "log"), "-w", "start")
    try:
        run(str(tools / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "prefect", "prefect")
        run(str(tools / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "prefect", "-d", "prefect",
            "-c", "CREATE EXTENSION IF NOT EXISTS pg_trgm")  # fmt: skip
        yield f"postgresql+asyncpg://prefect@127.0.0.1:{port}/prefect"
    finally:
        subprocess.run([*as_owner, str(tools / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "stop"],
                       capture_output=True, cwd=data)  # fmt: skip
        import shutil

        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def started(
    command: list[str], env: dict[str, str], log: Path, cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped (group-wide) on the way out."""
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
        )
    try:
        yield process
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def wait_for(what: str, check: Any, seconds: float, every: float = 0.5) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = check()
        except (httpx.HTTPError, OSError, ValueError):
            value = None
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {seconds:.0f} s waiting for {what}")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children[parent_of(int(entry.name))].append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Fleet:
    """The servers and workers of one benchmark, each stoppable and restartable."""

    def __init__(self, folder: Path, stack: ExitStack) -> None:
        self.folder, self.stack = folder, stack
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PREFECT_", "RELAYBATCH_")) and key != "DO_NOT_TRACK"
        }
        self.env.update(
            {
                "PREFECT_HOME": str(folder / "prefect-home"),
                "PREFECT_API_URL": self.api,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "DO_NOT_TRACK": "1",
                "PREFECT_SERVER_UI_ENABLED": "false",
                "PREFECT_LOGGING_TO_API_ENABLED": "false",
            }
        )
        self.http = httpx.Client(base_url=self.api, timeout=30)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.contexts: dict[str, Any] = {}

    def start(
        self, name: str, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        context = started(command, env or self.env, self.folder / f"{name}.log", self.folder)
        process = context.__enter__()
        self.contexts[name], self.processes[name] = context, process
        self.stack.callback(lambda: self.stop(name) if self.processes.get(name) is process else None)
        return process

    def stop(self, name: str) -> None:
        self.processes.pop(name)
        self.contexts.pop(name).__exit__(None, None, None)

    def start_server(self) -> None:
        self.start(
            "server",
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
        )
        wait_for("the Prefect server", lambda: self.http.get("/health").status_code == 200, 600)

    def flow_runs(self) -> list[dict[str, Any]]:
        answer = self.http.post("/flow_runs/filter", json={"limit": 200})
        answer.raise_for_status()
        return list(answer.json())


# -- inputs ----------------------------------------------------------------------------------


def write_inputs(folder: Path, options: argparse.Namespace) -> Path:
    """The manifest and its two data files (chat rows d0.., video rows v0.., 4/8/12 s in turn)."""
    with open(folder / "docs.csv", "w", newline="") as handle:
        handle.write("id,prompt\n")
        for n in range(options.items):
            handle.write(f"d{n},Summarise document {n} in one line.\n")
    with open(folder / "clips.csv", "w", newline="") as handle:
        handle.write("id,prompt,seconds\n")
        for n in range(options.videos):
            handle.write(f"v{n},a lighthouse at dusk number {n},{LENGTHS[n % len(LENGTHS)]}\n")
    budget = f", budget_usd: '{options.budget_usd}'" if options.budget_usd is not None else ""
    manifest = folder / "fleet.yaml"
    jobs = {
        "docs": f"  - {{name: docs, kind: chat, model: {CHAT_MODEL}, prompt: '{{prompt}}', data: docs.csv,\n"
        "     carry: [id]}\n",
        "clips": f"  - {{name: clips, kind: video, model: {VIDEO_MODEL}, prompt: '{{prompt}}',\n"
        "     data: clips.csv, "
        "request: {seconds: '{seconds}', size: 1280x720}, carry: [id],\n"
        "     video: {expected_render_seconds: 120}}\n",
    }
    manifest.write_text(
        f"run: {{name: fleet, max_in_flight: {{{VIDEO_MODEL}: {options.cap}}}{budget}}}\n"
        "jobs:\n" + "".join(jobs[job] for job in job_order(options))
    )
    return manifest


def job_order(options: argparse.Namespace) -> list[str]:
    """The manifest's jobs in order: a partition sends them in this order."""
    return ["clips", "docs"] if options.videos_first else ["docs", "clips"]


def emulator_config(path: Path, options: argparse.Namespace) -> Path:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "configs" / "emulator.yaml").read_text())
    for account in config["accounts"]:
        if account["name"] == "demo":
            account["rate_limit_rpm"] = options.rpm
            account["balance_usd"] = "1000000.00"
    config.setdefault("faults", {})["rules"] = [{"fault": f"latency={options.latency}", "rate": 1.0}]
    config["media"] = {
        "video": {
            "queued_seconds": 0.0,
            "render_seconds_base": 0.0,
            "render_seconds_per_video_second": RENDER_SECONDS_PER_VIDEO_SECOND,
            "max_in_flight": options.cap,
        }
    }
    path.write_text(yaml.safe_dump(config))
    return path


# -- the run ---------------------------------------------------------------------------------


class Watch:
    """What the benchmark samples while the run goes: arrivals, renders in flight, flow runs, RSS."""

    def __init__(self, gateway: str, fleet: Fleet, total: int) -> None:
        self.gateway = httpx.Client(base_url=gateway, timeout=30)
        self.fleet, self.total = fleet, total
        self.arrivals: list[dict[str, Any]] = []
        self.cutoff = 0.0
        self.charged: set[str] = set()
        self.renders: list[int] = []
        self.rss: dict[int, tuple[str, float]] = {}
        self.runs: list[dict[str, Any]] = []

    def sample(self) -> None:
        settled = time.time() - SETTLED_AFTER
        log = self.gateway.get(
            "/_emulator/requests", params={"since": self.cutoff, "distinct": "false"}
        ).json()
        fresh = [entry for entry in log["recent"] if entry["at"] <= settled]
        self.arrivals.extend(fresh)
        self.cutoff = max([self.cutoff, *(entry["at"] for entry in fresh)])
        for entry in fresh:
            if entry["method"] == "POST" and entry["status"] == 200:
                self.charged.add(entry["body_hash"])
        videos = self.gateway.get("/_emulator/videos").json()["in_flight"]
        self.renders.append(sum(row["count"] for row in videos if row["model"] == VIDEO_MODEL))
        with contextlib.suppress(httpx.HTTPError):  # the server restarting
            self.runs = self.fleet.flow_runs()
        for name, process in self.fleet.processes.items():
            if name.startswith("worker"):
                for pid in descendants(process.pid):
                    kind = "worker" if pid == process.pid else "flow run"
                    if "python" in command_line(pid) or pid == process.pid:
                        self.rss[pid] = (kind, max(self.rss.get(pid, (kind, 0.0))[1], peak_rss_mb(pid)))

    def progress(self) -> float:
        return len(self.charged) / self.total


def kill_a_partition(fleet: Fleet, runs: list[dict[str, Any]]) -> tuple[float, str, int, str]:
    """SIGKILL a Running partition's flow-run process and its worker, as a machine dies: (when,
    which partition, its process, its worker's name)."""
    for run in runs:
        pid = run.get("infrastructure_pid")
        if run["state_type"] != "RUNNING" or not pid:
            continue
        try:
            owner = next(
                name
                for name, p in fleet.processes.items()
                if name.startswith("worker") and parent_of(int(pid)) == p.pid
            )
        except (StopIteration, OSError):
            continue
        killed_at = time.time()
        os.kill(int(pid), signal.SIGKILL)
        os.killpg(fleet.processes[owner].pid, signal.SIGKILL)
        fleet.stop(owner)
        return killed_at, run["parameters"]["partition"], int(pid), owner
    raise RuntimeError("no Running partition with a process to kill")


def run_fleet(options: argparse.Namespace, folder: Path) -> dict[str, Any]:
    manifest = write_inputs(folder, options)
    total = options.items + options.videos
    with ExitStack() as stack:
        fleet = Fleet(folder, stack)
        if options.postgres:
            fleet.env["PREFECT_API_DATABASE_CONNECTION_URL"] = stack.enter_context(postgres())
        emulator_port = free_port()
        gateway = f"http://127.0.0.1:{emulator_port}"
        fleet.start(
            "emulator",
            [str(BIN / "relaybatch"), "emulator", "serve", "--port", str(emulator_port),
             "--config", str(emulator_config(folder / "emulator.yaml", options))],
        )  # fmt: skip
        began = time.monotonic()
        fleet.start_server()
        wait_for("the emulator", lambda: httpx.get(f"{gateway}/_emulator/clock").status_code == 200, 60)
        print(f"prefect server and emulator up in {time.monotonic() - began:.0f} s", flush=True)
        deployments = folder / "deployments.yaml"
        deployments.write_text(
            f"work_pool: fleet\ndeployments:\n  - name: partition\n    flow: run-manifest\n"
            f"    parameters:\n      manifest: {manifest}\n"
        )
        deploy = subprocess.run(
            [str(BIN / "relaybatch"), "deploy", "--config", str(deployments),
             "--silent-after", str(options.silent_after)],
            env=fleet.env, cwd=folder, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if deploy.returncode != 0:
            raise SystemExit(f"relaybatch deploy failed:\n{deploy.stdout}{deploy.stderr}")
        worker_env = {
            **fleet.env,
            "PREFECT_HOME": str(folder / "worker-home"),
            "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "RELAYBATCH_BASE_URL": gateway,
            "RELAYBATCH_API_KEY": KEY,
            "RELAYBATCH_SHARED_LIMIT_RPM": str(options.rpm),
            **({"RELAYBATCH_SHARED_LIMIT_BLOCK": str(options.block)} if options.block else {}),
        }
        worker = [str(BIN / "prefect"), "worker", "start", "--pool", "fleet", "--limit", "1"]
        worker += ["--type", "process"]  # a worker started while the server is down starts anyway
        for n in range(1, options.workers + 1):
            fleet.start(f"worker{n}", [*worker, "--name", f"worker{n}"], worker_env)
        runs_dir = folder / "runs"
        submit_env = {**fleet.env, "RELAYBATCH_BASE_URL": gateway, "RELAYBATCH_API_KEY": KEY}
        submitted_at = time.time()
        submit = [str(BIN / "relaybatch"), "submit", str(manifest), "--partitions", str(options.partitions)]
        submitting = fleet.start("submit", [*submit, "--runs-dir", str(runs_dir), "--wait"], submit_env)
        watch = Watch(gateway, fleet, total)
        kill: tuple[float, str, int, str] | None = None
        restarted_at: float | None = None
        while submitting.poll() is None:
            time.sleep(SAMPLE_SECONDS)
            watch.sample()
            done = watch.progress()
            if kill is None and done >= options.kill_at:
                kill = kill_a_partition(fleet, watch.runs)
                say(f"{done:.0%} done: killed partition {kill[1]} (pid {kill[2]}) and its worker {kill[3]}")
            if (
                kill is not None
                and kill[3] not in fleet.processes
                and time.time() >= kill[0] + options.back_after
            ):
                fleet.start(kill[3], [*worker, "--name", kill[3]], worker_env)  # the machine is back
                say(f"worker {kill[3]} started again, {time.time() - kill[0]:.0f} s after the kill")
            if restarted_at is None and done >= options.restart_at:
                restarted_at = time.time()
                fleet.stop("server")
                fleet.start_server()
                say(f"{done:.0%} done: Prefect server restarted in {time.time() - restarted_at:.0f} s")
            if time.time() - submitted_at > options.timeout:
                raise SystemExit(f"submit --wait still running after {options.timeout} s")
        ended_at = time.time()
        time.sleep(SETTLED_AFTER + 1)
        watch.sample()
        if submitting.returncode != 0:
            raise SystemExit(f"submit failed ({submitting.returncode}): see {folder / 'submit.log'}")
        return analyse(options, folder, fleet, watch, submitted_at, ended_at, kill, restarted_at)


# -- the figures -----------------------------------------------------------------------------


def body_hash(job: str, request: str) -> str:
    """The sha256 of the body the client sends for a stored request (a chat request goes through
    its request model, as the gateway client does)."""
    import pydantic_core

    body = json.loads(request)
    if job == "docs":
        from relaybatch.gateway import ChatCompletionRequest

        body = ChatCompletionRequest.model_validate(body).model_dump(
            mode="json", exclude_unset=True, by_alias=True
        )
    return hashlib.sha256(pydantic_core.to_json(body)).hexdigest()


def partition_of_rows(folder: Path, count: int, jobs: dict[str, int]) -> dict[str, list[int]]:
    """Each job's rows' partition numbers (1-based), from the split `submit` wrote: a partition's
    range of a job starts at a row position ([offset, lines, rows, until]; none: no rows there)."""
    split = json.loads((folder / "runs" / "fleet" / f"partitions-{count}.json").read_text())
    found: dict[str, list[int]] = {}
    for index, (job, rows) in enumerate(jobs.items()):
        starts = sorted(
            (where[2], number)
            for number, partition in enumerate(split["partitions"], start=1)
            if (where := partition["ranges"].get(str(index))) is not None
        )
        firsts = [row for row, _ in starts]
        found[job] = [starts[bisect.bisect_right(firsts, row) - 1][1] for row in range(rows)]
    return found


def flow_run_starts(fleet: Fleet, runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each partition's Running states' times (a resumed partition has several)."""
    from datetime import datetime

    starts: dict[str, list[float]] = {}
    for run in runs:
        states = fleet.http.get("/flow_run_states/", params={"flow_run_id": run["id"]}).json()
        starts[run["parameters"]["partition"]] = sorted(
            datetime.fromisoformat(state["timestamp"]).timestamp()
            for state in states
            if state["type"] == "RUNNING"
        )
    return starts


def planning(fleet: Fleet, runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each partition's plan task runs' durations."""
    found: dict[str, list[float]] = {}
    for run in runs:
        tasks = fleet.http.post("/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}).json()
        found[run["parameters"]["partition"]] = [
            task["total_run_time"]
            for task in tasks
            if task["name"].startswith("plan") and task["state_type"] == "COMPLETED"
        ]
    return found


def analyse(
    options: argparse.Namespace,
    folder: Path,
    fleet: Fleet,
    watch: Watch,
    submitted_at: float,
    ended_at: float,
    kill: tuple[float, str, int, str] | None,
    restarted_at: float | None,
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    runs = fleet.flow_runs()
    arrivals = sorted(watch.arrivals, key=lambda entry: entry["at"])
    times = [entry["at"] for entry in arrivals]
    first = times[0]
    figures["requests"] = len(arrivals)
    figures["worst_window"] = max_in_window(times, WINDOW)
    figures["429_after_first_minute"] = sum(
        1 for e in arrivals if e["status"] == 429 and e["at"] > first + WINDOW
    )
    figures["429_all"] = sum(1 for e in arrivals if e["status"] == 429)
    figures["unanswered"] = sum(1 for e in arrivals if e["status"] == 0)
    figures["renders_max"] = max(watch.renders, default=0)
    figures["render_samples"] = len(watch.renders)

    # The merged run: every item's state and request (read after every writer has ended).
    store = folder / "runs" / "fleet" / "checkpoint.sqlite"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        items = db.execute(
            "select item_id, (select name from jobs where id = items.job), request, state, remote_id "
            "from items where state != 'superseded'"
        ).fetchall()
    states = collections.Counter(state for _, _, _, state, _ in items)
    figures["states"] = dict(states)
    expected = {f"d{n}" for n in range(options.items)} | {f"v{n}" for n in range(options.videos)}
    # Lost: not in the merged store at all (a pending item held back by the budget is there, to resume).
    accounted = {item_id for item_id, _, _, _, _ in items}
    figures["lost"] = len(expected - accounted)

    ledger = watch.gateway.get("/_emulator/ledger").json()
    billed = collections.Counter(charge["body_hash"] for charge in ledger["charges"])
    figures["billed_twice"] = sum(1 for count in billed.values() if count > 1)
    log = watch.gateway.get("/_emulator/requests").json()
    figures["posted_twice"] = sum(
        1 for row in log["distinct"] if row["method"] == "POST" and row["count"] > 1
    )
    figures["bill_usd"] = Decimal(ledger["total_usd"])
    report = subprocess.run(
        [str(BIN / "relaybatch"), "report", "fleet", "--runs-dir", str(folder / "runs"),
         "--output", str(folder / "costs.csv"), "--dashboards-dir", str(folder / "dashboards")],
        env=fleet.env, cwd=folder, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if report.returncode != 0:
        raise SystemExit(f"relaybatch report failed:\n{report.stdout}{report.stderr}")
    with open(folder / "costs.csv") as handle:
        rows = list(csv.DictReader(handle))
    column = next(name for name in rows[0] if name.endswith("usd")) if rows else "usd"
    figures["ledger_usd"] = sum((Decimal(row[column]) for row in rows), Decimal(0))

    # Requests told apart by partition: the body hash of each item's request.
    sizes = {"docs": options.items, "clips": options.videos}
    partition_rows = partition_of_rows(
        folder, options.partitions, {job: sizes[job] for job in job_order(options)}
    )
    # Polls too: a video's poll path names its id, kept as the item's remote id.
    partition_of_hash: dict[str, int] = {}
    partition_of_path: dict[str, int] = {}
    for item_id, job, request, _, remote_id in items:
        row = int(item_id[1:])
        partition_of_hash[body_hash(job, request)] = partition_rows[job][row]
        if remote_id:
            partition_of_path[f"/v2/videos/{remote_id}"] = partition_rows[job][row]
    posts = [e for e in arrivals if e["method"] == "POST"]
    figures["unmatched_posts"] = sum(1 for e in posts if e["body_hash"] not in partition_of_hash)
    firsts: dict[int, list[float]] = collections.defaultdict(list)
    for e in arrivals:
        if e["method"] == "POST" and e["body_hash"] in partition_of_hash:
            firsts[partition_of_hash[e["body_hash"]]].append(e["at"])
        elif e["method"] == "GET" and e["path"] in partition_of_path:
            firsts[partition_of_path[e["path"]]].append(e["at"])
    starts = flow_run_starts(fleet, runs)
    first_request: dict[str, list[float]] = {}
    for partition, moments in starts.items():
        index = int(partition.split("/")[0])
        sent = sorted(firsts.get(index, []))
        first_request[partition] = [
            sent[bisect.bisect_left(sent, moment)] - moment
            for moment in moments
            if bisect.bisect_left(sent, moment) < len(sent)
        ]
    figures["first_request"] = first_request
    # Share of the limit while two or more partitions send: 5 s buckets after the first minute (the
    # first minute may start with a full bucket) in which POSTs of 2+ partitions arrived; every
    # arrival in them counts (polls too: the gateway counts them).
    senders: dict[int, set[int]] = collections.defaultdict(set)
    for e in posts:
        if e["body_hash"] in partition_of_hash:
            senders[int((e["at"] - first) // BUCKET)].add(partition_of_hash[e["body_hash"]])
    counts = collections.Counter(int((moment - first) // BUCKET) for moment in times)
    busy = [bucket for bucket, who in senders.items() if len(who) >= 2 and bucket * BUCKET >= WINDOW]
    busy = [bucket for bucket in busy if (bucket + 1) * BUCKET <= times[-1] - first]  # whole buckets
    figures["busy_seconds"] = len(busy) * BUCKET
    used = sum(counts[bucket] for bucket in busy)
    figures["share"] = used / (options.rpm / 60 * len(busy) * BUCKET) if busy else 0.0
    figures["429_video_creates"] = sum(
        1
        for e in arrivals
        if e["status"] == 429 and e["method"] == "POST" and e["path"].startswith("/v2/videos")
    )
    if kill is not None:
        index = int(kill[1].split("/")[0])
        sent = sorted(firsts.get(index, []))
        after = bisect.bisect_right(sent, kill[0])
        figures["resume_seconds"] = sent[after] - kill[0] if after < len(sent) else None
        figures["killed"] = kill[1]
    figures["planning"] = planning(fleet, runs)
    figures["rows"] = {
        f"{n}/{options.partitions}": sum(rows.count(n) for rows in partition_rows.values())
        for n in range(1, options.partitions + 1)
    }
    figures["rss"] = watch.rss
    figures["stalls"] = server_stalls(folder)
    (folder / "arrivals.json").write_text(json.dumps(arrivals))  # kept with --keep, to look again
    figures["wall_seconds"] = ended_at - submitted_at
    figures["restarted"] = restarted_at is not None
    return figures


def server_stalls(folder: Path) -> list[int]:
    """How long the Prefect server did not answer, each time a process said it was back (the
    flow-run processes' lines in their workers' logs; a stall is said once per process)."""
    import re

    said = re.compile(r"Prefect server at \S+ answers again after (\d+) s")
    return [
        int(m.group(1)) for log in sorted(folder.glob("worker*.log")) for m in said.finditer(log.read_text())
    ]


def ratio(value: float, goal: float) -> str:
    return f"{value / goal:.2f}x" if goal else ("0 (met)" if value == 0 else f"{value} (goal 0)")


def show(options: argparse.Namespace, f: dict[str, Any]) -> None:
    """The figures, each with its ratio to its goal."""
    limit, cap = options.rpm, options.cap
    print(
        f"\n{options.items} chat items + {options.videos} videos in {options.partitions} partitions, "
        f"{options.workers} workers, {limit} rpm, latency {options.latency} s, cap {cap}; submit -> "
        f"merged in {f['wall_seconds']:.0f} s; {f['requests']} requests; states {f['states']}"
    )
    share = f["share"]
    print(
        f"share of the limit while 2+ partitions send ({f['busy_seconds']:.0f} s after the first minute): "
        f"{share:.1%} (goal >= 97 %: {share / GOALS['share']:.2f}x)"
    )
    stalls, database = f["stalls"], "PostgreSQL" if options.postgres else "SQLite"
    print(
        f"Prefect server ({database}) not answering, as the processes said it: "
        f"{len(stalls)} times, {max(stalls, default=0)} s at most (billed sends wait meanwhile)"
    )
    worst = f["worst_window"]
    print(f"worst 60 s window: {worst} arrivals (limit {limit}: {worst / limit:.2f}x)")
    print(
        f"429s after the first minute: {f['429_after_first_minute']} (all: {f['429_all']}, of which "
        f"{f['429_video_creates']} on video creates: the render cap; goal 0)"
    )
    renders = f["renders_max"]
    print(
        f"renders in flight: max {renders} over {f['render_samples']} samples "
        f"(cap {cap}: {renders / cap:.2f}x)"
    )
    print(f"bodies billed twice: {f['billed_twice']} (goal 0); POST bodies sent twice: {f['posted_twice']}")
    print(f"items lost: {f['lost']} (goal 0)")
    diff = f["ledger_usd"] - f["bill_usd"]
    same = "equal to the cent" if abs(diff) < Decimal("0.005") else "NOT equal"
    print(f"ledger {f['ledger_usd']:.6f} USD, emulator bill {f['bill_usd']:.6f} USD: {diff:+.6f} ({same})")
    if options.budget_usd is not None:
        budget = Decimal(options.budget_usd)
        print(f"budget {budget} USD: billed {f['bill_usd']:.2f} ({f['bill_usd'] / budget:.3f}x; goal <= 1)")
    if "killed" in f:
        resume = f["resume_seconds"]
        shown = (
            f"{resume:.0f} s ({resume / GOALS['resume_seconds']:.2f}x of 150 s)"
            if resume is not None
            else "none"
        )
        print(f"kill of partition {f['killed']} -> its first resumed request: {shown}")
    firsts = sorted(value for values in f["first_request"].values() for value in values)
    if firsts:
        print(
            f"flow run start -> first request: max {firsts[-1]:.1f} s "
            f"({firsts[-1] / GOALS['first_request_seconds']:.2f}x of 5 s), median "
            f"{firsts[len(firsts) // 2]:.1f} s over {len(firsts)} starts"
        )
    print("partition: rows, planning seconds, flow run start -> first request (s)")
    for partition, rows in f["rows"].items():
        plans = ", ".join(f"{s:.1f}" for s in f["planning"].get(partition, []))
        starts = ", ".join(f"{s:.1f}" for s in f["first_request"].get(partition, []))
        print(f"  {partition}: {rows} rows, plan {plans or '-'} s, first request {starts or '-'} s")
    peaks: dict[str, float] = collections.defaultdict(float)
    for kind, mb in f["rss"].values():
        peaks[kind] = max(peaks[kind], mb)
    for kind, mb in sorted(peaks.items()):
        print(f"peak RSS of a {kind} process: {mb:.0f} MB (goal <= 250 MB: {mb / GOALS['rss_mb']:.2f}x)")
    print(
        f"POST bodies not told apart: {f['unmatched_posts']}; "
        f"requests unanswered when read: {f['unanswered']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=60_000)
    parser.add_argument("--videos", type=int, default=400)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rpm", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--cap", type=int, default=40)
    parser.add_argument(
        "--block", type=int, default=None, help="RELAYBATCH_SHARED_LIMIT_BLOCK (default: 0.5 s of the limit)"
    )
    parser.add_argument("--kill-at", type=float, default=0.4)
    parser.add_argument("--restart-at", type=float, default=0.7)
    parser.add_argument("--budget-usd", default=None, help="run budget (e.g. 60 %% of a run's bill)")
    parser.add_argument("--silent-after", type=float, default=60.0, help="relaybatch deploy --silent-after")
    parser.add_argument(
        "--back-after",
        type=float,
        default=90.0,
        help="seconds until the killed machine's worker starts again",
    )
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    parser.add_argument(
        "--videos-first",
        action="store_true",
        help="the video job first in the manifest (renders overlap chat)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (logs, runs)")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the Prefect server's database in a throwaway PostgreSQL cluster, not SQLite",
    )
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    print(f"scratch folder {folder}", flush=True)
    try:
        figures = run_fleet(options, folder)
        show(options, figures)
    finally:
        if not options.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
