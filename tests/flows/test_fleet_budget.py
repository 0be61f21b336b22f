"""The budget and render cap the Prefect server holds, proven with real processes: a real `prefect
server start` (one for the module), a served emulator per test with fast settings, partitions run
as separate `relaybatch run --partition I/N` processes.

- two processes sharing one run budget never pass it, and the room goes where the work is;
- a SIGKILL with calls between reserve and settle leaves them counted, a server restart keeps
  every count, and the resumed partition brings its holder to its ledger;
- two processes share one cap on renders in flight;
- while the server cannot be reached, no billed request is sent and polls go on; sending resumes
  when it answers.
"""

from __future__ import annotations

import collections
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.flows.test_fleet import REPO, Fleet
from tests.flows.test_scheduler import BIN, _wait_for
from tests.ports import free_port

pytestmark = pytest.mark.slow

UNIT = Decimal("0.000001")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path_factory.mktemp("fleet-budget"))
    try:
        fleet.start_server()
        yield fleet
    finally:
        fleet.close()


class Gateway:
    """A served emulator with fast settings, and its admin API."""

    def __init__(self, fleet: Fleet, folder: Path, latency: float, **video: Any) -> None:
        config = yaml.safe_load((REPO / "configs" / "emulator.yaml").read_text())
        for account in config["accounts"]:
            account["rate_limit_rpm"] = 6000
            account["balance_usd"] = "1000.00"
        config.setdefault("faults", {})["rules"] = [{"fault": f"latency={latency}", "rate": 1.0}]
        config["media"] = {"video": {"queued_seconds": 0.1, "render_seconds_per_video_second": 0.0, **video}}
        path = folder / "emulator.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        self.name = f"emulator-{port}"
        command = [str(BIN / "relaybatch"), "emulator", "serve", "--host", "127.0.0.1", "--port", str(port)]
        fleet.start(self.name, [*command, "--config", str(path)])
        self.url = f"http://127.0.0.1:{port}"
        _wait_for(
            "the emulator up",
            lambda: httpx.get(f"{self.url}/_emulator/clock").status_code == 200,
            60,
            fleet.logs,
        )

    def billed(self) -> tuple[Decimal, collections.Counter[str]]:
        ledger = httpx.get(f"{self.url}/_emulator/ledger", timeout=10).json()
        return Decimal(ledger["total_usd"]), collections.Counter(c["body_hash"] for c in ledger["charges"])

    def rendering(self) -> int:
        answer = httpx.get(f"{self.url}/_emulator/videos", timeout=10).json()
        return sum(entry["count"] for entry in answer["in_flight"])


def _env(fleet: Fleet, gateway: Gateway, **extra: str) -> dict[str, str]:
    return {
        **fleet.env,
        "RELAYBATCH_BASE_URL": gateway.url,
        "RELAYBATCH_API_KEY": "rb-demo-key",
        "RELAYBATCH_PROGRESS_EVERY_SECONDS": "1",
        **extra,
    }


def _partition(
    fleet: Fleet, name: str, manifest: Path, part: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    runs = manifest.parent / "runs"
    command = [str(BIN / "relaybatch"), "run", str(manifest), "--partition", part, "--runs-dir", str(runs)]
    return fleet.start(name, command, env)


def _split(manifest: Path, count: int, env: dict[str, str]) -> None:
    runs = manifest.parent / "runs"
    command = [str(BIN / "relaybatch"), "partition", str(manifest), "--partitions", str(count)]
    done = subprocess.run(
        [*command, "--runs-dir", str(runs)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _limits(fleet: Fleet, prefix: str) -> dict[str, int]:
    found = fleet.http.post("/v2/concurrency_limits/filter", json={}).json()
    return {limit["name"]: limit["active_slots"] for limit in found if limit["name"].startswith(prefix)}


def _store(run_dir: Path, part: str) -> Path:
    index, count = part.split("/")
    return run_dir / "shards" / f"part-{index}-of-{count}"


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    path = store / "checkpoint.sqlite"
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []


def _counted(store: Path) -> Decimal:
    """What the store's cost ledger counts against a budget (charges, unknown at the worst case)."""
    path = store / "costs.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("select usd, known_usd, reserved_usd from charges").fetchall()
    total = Decimal(0)
    for usd, known, reserved in rows:
        total += Decimal(usd) if usd is not None else max(Decimal(known or 0), Decimal(reserved or 0))
    return total


def _ended(fleet: Fleet, name: str, process: subprocess.Popen[bytes], seconds: float) -> str:
    _wait_for(f"{name} to end", lambda: process.poll() is not None, seconds, fleet.logs)
    log = next(log for log in reversed(fleet.logs) if log.name.startswith(f"{name}-"))
    output = log.read_text(errors="replace")
    assert "Traceback" not in output, output[-3000:]
    fleet.stop(name)
    return output


@pytest.mark.parametrize("scope", ["run", "job"])
def test_two_processes_share_one_budget_and_never_pass_it(server: Fleet, tmp_path: Path, scope: str) -> None:
    """The run's budget, or a job's (then the run has none): held whole by the server."""
    gateway = Gateway(server, tmp_path, latency=0.2)
    run = f"shared-{free_port()}"
    # Inline items split by position: partition 1 holds 60 short prompts (about 25 millionths of a
    # dollar each), partition 2 60 long ones (about 120). With the budget split in two, partition 2
    # would stop at half of it while partition 1 leaves most of its half unspent (74 % in all).
    long = "Summarise the next chapter in one line, keeping every name. " * 40
    items = [{"id": f"s{n}", "prompt": f"Say {n}."} for n in range(60)]
    items += [{"id": f"l{n}", "prompt": f"{n}: {long}"} for n in range(60)]
    budget = Decimal("0.0060")
    manifest = tmp_path / "shared.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "run": {
                    "name": run,
                    "concurrency": 8,
                    **({"budget_usd": str(budget)} if scope == "run" else {}),
                },
                "jobs": [
                    {
                        "name": "docs",
                        "kind": "chat",
                        "model": "relay-chat-small",
                        "prompt": "{prompt}",
                        "items": items,
                        "request": {"max_tokens": 64},
                        **({"budget_usd": str(budget)} if scope == "job" else {}),
                    }
                ],
            }
        )
    )
    # Room comes back from the other process within IDLE_SECONDS of asking for it (or of its end);
    # the wait covers that on a loaded machine.
    env = _env(server, gateway, RELAYBATCH_SERVER_BUDGET_WAIT_SECONDS="8")
    _split(manifest, 2, env)
    processes = {part: _partition(server, f"p{part[0]}", manifest, part, env) for part in ("1/2", "2/2")}
    outputs = {part: _ended(server, f"p{part[0]}", process, 300) for part, process in processes.items()}

    billed, bodies = gateway.billed()
    assert billed <= budget, (billed, outputs)
    assert billed >= budget * Decimal("0.9"), (billed, outputs)  # the room went where the work was
    assert max(bodies.values()) == 1
    assert any("held by the Prefect server" in output for output in outputs.values()), outputs
    run_dir = tmp_path / "runs" / run
    counted = {part: _counted(_store(run_dir, part)) for part in processes}
    assert sum(counted.values()) <= budget
    name = f"relaybatch-budget:run:{run}" if scope == "run" else f"relaybatch-budget:job:{run}:docs"
    limits = _limits(server, name)
    holders = {name: slots for name, slots in limits.items() if ":held-by:" in name}
    assert limits[name] == sum(holders.values())
    assert _limits(server, f"relaybatch-budget:{'job' if scope == 'run' else 'run'}:{run}") == {}
    for part, usd in counted.items():  # each store holds what its ledger counts, rounded up
        holder = f"{name}:held-by:{run}:{_store(run_dir, part).name}"
        assert holders[holder] == int((usd / UNIT).to_integral_value(rounding="ROUND_CEILING"))


def test_a_sigkill_keeps_calls_in_flight_counted_through_a_server_restart_until_the_resume(
    server: Fleet, tmp_path: Path
) -> None:
    gateway = Gateway(server, tmp_path, latency=4.0)  # calls stay in flight long enough to kill
    run = f"killed-{free_port()}"
    (tmp_path / "docs.csv").write_text("id,prompt\n" + "".join(f"d{n},Say {n}.\n" for n in range(24)))
    manifest = tmp_path / "killed.yaml"
    manifest.write_text(
        f"run: {{name: {run}, budget_usd: '0.05', concurrency: 6}}\n"
        "jobs:\n  - {name: docs, kind: chat, model: relay-chat-small, prompt: '{prompt}', data: docs.csv, "
        "carry: [id], request: {max_tokens: 64}}\n"
    )
    env = _env(server, gateway)
    _split(manifest, 1, env)
    store = _store(tmp_path / "runs" / run, "1/1")
    process = _partition(server, "victim", manifest, "1/1", env)
    sending = "select count(*) from items where state = 'sending'"
    _wait_for("calls in flight", lambda: (_rows(store, sending) or [(0,)])[0][0] >= 6, 300, server.logs)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    server.stop("victim")
    budget_name = f"relaybatch-budget:run:{run}"
    holder = f"{budget_name}:held-by:{run}:part-1-of-1"
    before = _limits(server, budget_name)
    reserved = _counted(store)  # the reservations of the calls in flight, at their worst case
    assert reserved > 0
    assert before[holder] == before[budget_name] >= int(reserved / UNIT)

    server.stop("server")  # the server restarts: the counts are rows of its database
    server.start_server()
    assert _limits(server, budget_name) == before

    gateway_fast = httpx.put(f"{gateway.url}/_emulator/faults", json={"seed": 0, "rules": []}, timeout=10)
    assert gateway_fast.status_code == 200
    resumed = _partition(server, "resumed", manifest, "1/1", env)
    output = _ended(server, "resumed", resumed, 300)
    states = dict(_rows(store, "select state, count(*) from items group by 1"))
    assert states.get("done", 0) + states.get("uncertain", 0) == 24, (states, output)
    assert states.get("uncertain", 0) >= 6  # the calls the kill caught: unknown outcomes
    counted = _counted(store)  # unknown outcomes still at their worst case
    after = _limits(server, budget_name)
    assert (
        after[holder]
        == after[budget_name]
        == int((counted / UNIT).to_integral_value(rounding="ROUND_CEILING"))
    )
    billed, _ = gateway.billed()
    assert billed <= counted


def test_two_processes_share_one_cap_on_renders_in_flight(server: Fleet, tmp_path: Path) -> None:
    gateway = Gateway(server, tmp_path, latency=0.0, render_seconds_base=1.5, max_in_flight=20)
    run = f"renders-{free_port()}"
    model = "relay-video-2"
    manifest = tmp_path / "renders.yaml"
    items = "".join(f"      - {{id: v{n}, scene: scene {n}}}\n" for n in range(16))
    manifest.write_text(
        f"run: {{name: {run}, budget_usd: '100', max_in_flight: {{{model}: 3}}}}\n"
        "jobs:\n  - name: clips\n    kind: video\n    model: relay-video-2\n"
        "    request: {seconds: '4', size: 1280x720}\n    prompt: 'A pan across {scene}'\n"
        "    video: {expected_render_seconds: 1.5}\n    items:\n" + items
    )
    env = _env(server, gateway)
    _split(manifest, 2, env)
    processes = {part: _partition(server, f"r{part[0]}", manifest, part, env) for part in ("1/2", "2/2")}
    peak, samples = 0, 0
    while any(process.poll() is None for process in processes.values()):
        peak = max(peak, gateway.rendering())
        samples += 1
        time.sleep(0.2)
    for part, process in processes.items():
        _ended(server, f"r{part[0]}", process, 60)
    done = sum(
        _rows(_store(tmp_path / "runs" / run, part), "select count(*) from items where state = 'done'")[0][0]
        for part in processes
    )
    assert done == 16
    assert samples > 10 and peak == 3  # each process alone may have 3: together they had 3
    assert _limits(server, f"relaybatch-renders:{model}").get(f"relaybatch-renders:{model}") == 0


def test_sends_stop_while_the_server_is_away_and_polls_go_on(server: Fleet, tmp_path: Path) -> None:
    gateway = Gateway(server, tmp_path, latency=0.5, render_seconds_base=8.0, max_in_flight=20)
    run = f"away-{free_port()}"
    items = "".join(f"      - {{id: v{n}, scene: scene {n}}}\n" for n in range(4))
    (tmp_path / "docs.csv").write_text("id,prompt\n" + "".join(f"d{n},Say {n}.\n" for n in range(60)))
    manifest = tmp_path / "away.yaml"
    manifest.write_text(
        f"run: {{name: {run}, budget_usd: '100', concurrency: 2}}\n"
        "jobs:\n  - name: clips\n    kind: video\n    model: relay-video-2\n"
        "    request: {seconds: '4', size: 1280x720}\n    prompt: 'A pan across {scene}'\n"
        "    video: {expected_render_seconds: 8}\n    items:\n"
        + items
        + "  - {name: docs, kind: chat, model: relay-chat-small, prompt: '{prompt}', data: docs.csv}\n"
    )
    env = _env(server, gateway)
    _split(manifest, 1, env)
    store = _store(tmp_path / "runs" / run, "1/1")
    process = _partition(server, "away", manifest, "1/1", env)
    rendering = "select count(*) from items where kind = 'video' and state in ('submitted', 'polling')"
    _wait_for("renders in flight", lambda: (_rows(store, rendering) or [(0,)])[0][0] >= 2, 300, server.logs)

    server.stop("server")
    time.sleep(4)  # the process notices (it checks every 2 s) and what was in flight ends
    sent = "select count(*) from items where state != 'pending'"
    videos_done = "select count(*) from items where kind = 'video' and state = 'done'"
    sent_at, videos_at = _rows(store, sent)[0][0], _rows(store, videos_done)[0][0]
    # The renders (8 s) finish while the server is away: polled and downloaded. Waited for, not
    # slept on: a fixed 10 s both wasted the seconds after the first render ended and could end
    # before it on a loaded machine.
    _wait_for(
        "a render to end while the server is away",
        lambda: _rows(store, videos_done)[0][0] > videos_at,
        120,
        server.logs,
    )
    assert _rows(store, sent)[0][0] == sent_at  # nothing new sent meanwhile

    server.start_server()
    output = _ended(server, "away", process, 300)
    assert "cannot be reached" in output and "sending resumes" in output, output[-3000:]
    states = dict(_rows(store, "select state, count(*) from items group by 1"))
    assert states == {"done": 64}, states
