"""Against a real `prefect server start`: the scheduler creates flow runs for a cron deployment and
one of them runs to completion through `relaybatch serve`; a Ctrl-C'd `relaybatch run` ends its
flow run Cancelled.

This is the path a fresh install takes for scheduled runs (docs/prefect.md): it broke when pip
resolved SQLAlchemy 2.1, on which prefect 3.8.8's scheduler fails to insert scheduled runs, and no
test used the scheduler. Everything started here (server, serve) runs in its own process group and
is stopped here, even when an assertion fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import free_port as _free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
START_SECONDS = 300.0  # a loaded 2-core machine has taken 85 s to start the server
# A served slow run's items (a second a call, 16 in flight): two minutes of sending, so a stop that
# goes through serve and the runner's cancel still meets it mid-run on a loaded machine.
SERVED_ITEMS = 2000


@contextmanager
def _started(
    command: list[str], env: dict[str, str], log: Path, cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group; the whole group is stopped on the way out."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # Anything left in the group (a flow-run subprocess) goes too.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _wait_for(what: str, check: Callable[[], Any], seconds: float, logs: list[Path]) -> Any:
    """``check()`` until it is truthy (its value returned), or fail naming ``what`` with the logs'
    tails. It looks four times a second: a wait ends a quarter of a second after its event at the
    most (these modules wait for some thirty events), and each look is one small request or read."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.25)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
    raise AssertionError(f"{what}: not within {seconds:.0f} s\n{tails}")


class _RetryingWhenBusy(httpx.HTTPTransport):
    """Retries a 503 as Prefect's own client does (its SQLite answers "database is locked" as 503
    while the scheduler and the runs write: the server says "try again", not "no")."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(6):
            response = super().handle_request(request)
            if response.status_code != 503 or attempt == 5:
                return response
            response.read()
            response.close()
            time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")


@dataclass
class Server:
    api: str
    env: dict[str, str]
    http: httpx.Client
    log: Path


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real Prefect server for this module, in its own PREFECT_HOME on a free port."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PREFECT_", "RELAYBATCH_")) and key != "DO_NOT_TRACK"
    }
    env.update(
        {
            "PREFECT_HOME": str(home / "prefect-home"),
            "PREFECT_API_URL": api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_UI_ENABLED": "false",
            # A scheduler cycle every second instead of every minute, and a runner that looks
            # for due runs every 2 s: the test waits for them, not for default intervals.
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "1",
            "PREFECT_RUNNER_POLL_FREQUENCY": "2",
            # Enough scheduled runs ahead of an hourly interval for three nights and three missed ones.
            "PREFECT_SERVER_SERVICES_SCHEDULER_MIN_RUNS": "8",
        }
    )
    log = home / "server.log"
    server = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with (
        _started(server, env, log, home),
        httpx.Client(base_url=api, timeout=10, transport=_RetryingWhenBusy()) as http,
    ):
        _wait_for("the server healthy", lambda: http.get("/health").status_code == 200, START_SECONDS, [log])
        yield Server(api, env, http, log)


def test_cron_deployment_gets_scheduled_runs_and_one_completes_through_serve(
    tmp_path: Path, prefect_server: Server
) -> None:
    env, http = prefect_server.env, prefect_server.http
    manifest = tmp_path / "tiny.csv"
    manifest.write_text(
        "id,model,prompt\nq1,relay-chat-small,Say hi\nq2,relay-chat-small,Say bye\n", encoding="utf-8"
    )
    config = tmp_path / "deployments.yaml"
    config.write_text(
        "deployments:\n"
        "  - name: every-minute\n"
        "    flow: run-manifest\n"
        '    cron: "* * * * *"\n'
        "    parameters:\n"
        f"      manifest: {manifest}\n"
        f"      runs_dir: {tmp_path / 'runs'}\n",
        encoding="utf-8",
    )
    serve_log = tmp_path / "serve.log"
    logs = [prefect_server.log, serve_log]
    serve = [str(BIN / "relaybatch"), "serve", "--config", str(config)]
    with _started(serve, env, serve_log, tmp_path) as serving:

        def scheduled_runs() -> list[dict[str, Any]]:
            runs = http.post("/flow_runs/filter", json={}).json()
            return [run for run in runs if run.get("auto_scheduled")]

        runs = _wait_for("scheduled flow runs created by the scheduler", scheduled_runs, START_SECONDS, logs)
        # Near a minute boundary serve may already have picked the earliest up: scheduled or on its way.
        healthy = ("SCHEDULED", "PENDING", "RUNNING", "COMPLETED")
        assert all(run["state_type"] in healthy for run in runs), runs
        assert any(run["state_type"] == "SCHEDULED" for run in runs)  # the schedule goes on
        first = min(runs, key=lambda run: run["expected_start_time"])
        if first["state_type"] == "SCHEDULED":  # due now instead of at the next minute boundary
            due = {"type": "SCHEDULED", "state_details": {"scheduled_time": datetime.now(UTC).isoformat()}}
            answer = http.post(f"/flow_runs/{first['id']}/set_state", json={"state": due, "force": True})
            assert answer.status_code in (200, 201), answer.text

        def finished() -> str | None:
            state = http.get(f"/flow_runs/{first['id']}").json()["state_type"]
            return state if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None

        assert _wait_for("the scheduled run finished", finished, START_SECONDS, logs) == "COMPLETED"

        # One Ctrl-C stops serve cleanly and leaves the schedule as it was.
        os.killpg(serving.pid, signal.SIGINT)
        assert serving.wait(timeout=60) == 0, serve_log.read_text()
        deployment = http.get(f"/deployments/{first['deployment_id']}").json()
        assert deployment["paused"] is False
        assert all(schedule["active"] for schedule in deployment["schedules"])
    served = serve_log.read_text()
    assert "never awaited" not in served and "Traceback" not in served, served
    name = first["name"]
    assert f"flow run {name}: started" in served
    assert (
        f"flow run {name}: completed (run-manifest); execution 1 (schedule {name}): new 2, sent 2" in served
    )
    assert "; run: items: done 2; spent" in served
    results = list((tmp_path / "runs" / "tiny" / "results").glob("*.parquet"))
    assert results, "the scheduled run wrote no results"


def test_ctrl_c_of_a_run_reporting_to_the_server_ends_its_flow_run_cancelled(
    tmp_path: Path, prefect_server: Server
) -> None:
    from tests.run.test_graceful_cancel import Run

    env = {key: value for key, value in prefect_server.env.items() if key.startswith("PREFECT_")}
    run = Run(tmp_path, latency=1.0, env=env)
    try:
        run.wait_until_sending(seconds=START_SECONDS)
        os.killpg(run.process.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = run.process.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        run.stop()
    text = out.decode() + err.decode()
    assert run.process.returncode == 130, text
    assert took < 10, f"took {took:.1f} s"
    assert "Traceback" not in text and "resume with: relaybatch run" in text

    runs = prefect_server.http.post("/flow_runs/filter", json={}).json()
    ours = [flow_run for flow_run in runs if flow_run["parameters"].get("manifest") == str(run.manifest)]
    assert [flow_run["state_type"] for flow_run in ours] == ["CANCELLED"]


@contextmanager
def _serving_a_slow_manifest(
    tmp_path: Path, prefect_server: Server, name: str
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """`relaybatch serve` with one deployment (``name``) of a manifest on a slow emulator, so its
    flow run is still sending when a test stops things: (serve, the deployment's id, serve's log)
    once the deployment is registered; serve is stopped on the way out.

    The flow run's grace period for requests in flight is a minute instead of 7 s: these tests check
    that a stop is clean (nothing left in flight), and a loaded machine can stall a process for
    seconds; cutting requests off when the grace runs out is tested on its own
    (tests/run/test_graceful_cancel.py)."""
    from tests.run.test_graceful_cancel import CHAT_CALLS, _env, _manifest, _slow_emulator

    manifest = _manifest(tmp_path, SERVED_ITEMS)
    config = tmp_path / "deployments.yaml"
    config.write_text(
        "deployments:\n"
        f"  - name: {name}\n"
        "    flow: run-manifest\n"
        "    parameters:\n"
        f"      manifest: {manifest}\n"
        f"      runs_dir: {tmp_path / 'runs'}\n",
        encoding="utf-8",
    )
    env = _env(
        _slow_emulator(tmp_path, 1.0, CHAT_CALLS),
        {k: v for k, v in prefect_server.env.items() if k.startswith("PREFECT_")}
        | {"RELAYBATCH_STOP_GRACE_SECONDS": "60"},
    )
    serve_log = tmp_path / "serve.log"
    serve = [str(BIN / "relaybatch"), "serve", "--config", str(config)]
    with _started(serve, env, serve_log, tmp_path) as serving:
        deployment = _wait_for(
            "the deployment registered",
            lambda: prefect_server.http.get(f"/deployments/name/run-manifest/{name}").json().get("id"),
            START_SECONDS,
            [prefect_server.log, serve_log],
        )
        yield serving, deployment, serve_log


def test_one_ctrl_c_stops_serve_and_its_running_flow_run_ends_cancelled_cleanly(
    tmp_path: Path, prefect_server: Server
) -> None:
    """One Ctrl-C stops serve; the runner cancels the flow run still going (SIGTERM to its process),
    which stops cleanly: nothing left in flight, the flow run Cancelled."""
    from tests.run.test_graceful_cancel import _counts

    http = prefect_server.http
    with _serving_a_slow_manifest(tmp_path, prefect_server, "by-hand") as (serving, deployment, serve_log):
        flow_run = _create_flow_run(http, deployment)
        checkpoint = tmp_path / "runs" / "many" / "checkpoint.sqlite"
        _sending(http, flow_run["id"], checkpoint, [prefect_server.log, serve_log])
        os.killpg(serving.pid, signal.SIGINT)
        assert serving.wait(timeout=60) == 0
    state = http.get(f"/flow_runs/{flow_run['id']}").json()["state_type"]
    counts = _counts(checkpoint)
    log = serve_log.read_text()[-4000:]
    assert counts.get("sending", 0) == 0 and counts.get("uncertain", 0) == 0, (
        f"{counts} {_ending(checkpoint)}\n{log}"
    )
    assert 0 < counts["done"] < SERVED_ITEMS
    assert state == "CANCELLED", serve_log.read_text()[-3000:]


def _create_flow_run(http: httpx.Client, deployment: str) -> dict[str, Any]:
    answer = http.post(f"/deployments/{deployment}/create_flow_run", json={})
    assert answer.status_code == 201, f"{answer.status_code} {answer.text}"
    return dict(answer.json())


def _sending(http: httpx.Client, flow_run_id: str, checkpoint: Path, logs: list[Path]) -> None:
    """Until the flow run is executing at full width (tests.run.test_graceful_cancel.under_way), or
    fail at once if it ended first.

    Starting a flow-run process takes seconds on a quiet machine and minutes on a loaded one
    (Prefect's import, the runner's poll): the bound is the module's start-up allowance, and a
    flow run that crashed or finished ends the wait at once instead of running it out."""
    from tests.run.test_graceful_cancel import _counts, under_way

    def executing() -> bool:
        for _ in range(5):  # the checkpoint five times a second, the server once
            if under_way(_counts(checkpoint)):
                return True
            time.sleep(0.2)
        state = http.get(f"/flow_runs/{flow_run_id}").json()["state_type"]
        assert state not in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"), f"the flow run ended {state}"
        return False

    _wait_for("the served flow run sending", executing, START_SECONDS, logs)


def _ending(checkpoint: Path) -> dict[str, str | None]:
    """How the store says the last execution ended (a stop cut short says what cut it)."""
    from relaybatch.engine import CheckpointStore

    with CheckpointStore.open_read_only(checkpoint) as store:
        return store.last_execution()


def _descendants(pid: int) -> set[int]:
    from tests.run.test_graceful_cancel import _children

    found, frontier = set(), {pid}
    while frontier:
        children = set().union(*(_children(parent) for parent in frontier)) - found
        found |= children
        frontier = children
    return found


def test_a_sigkill_of_serve_stops_its_flow_run_cleanly_within_seconds(
    tmp_path: Path, prefect_server: Server
) -> None:
    """The flow-run process lives in its own session; it stops (as on SIGTERM) when serve dies."""
    from tests.run.test_graceful_cancel import _alive, _counts

    http = prefect_server.http
    with _serving_a_slow_manifest(tmp_path, prefect_server, "to-kill") as (serving, deployment, serve_log):
        flow_run = _create_flow_run(http, deployment)
        checkpoint = tmp_path / "runs" / "many" / "checkpoint.sqlite"
        _sending(http, flow_run["id"], checkpoint, [prefect_server.log, serve_log])
        started = _descendants(serving.pid)
        assert started
        serving.send_signal(signal.SIGKILL)  # serve alone, as the OOM killer would
        serving.wait()
        _wait_for(
            "every process serve started gone",
            lambda: not [pid for pid in started if _alive(pid)],
            20,
            [serve_log],
        )
    counts = _counts(checkpoint)
    assert counts.get("sending", 0) == 0 and counts.get("uncertain", 0) == 0, (counts, _ending(checkpoint))


NIGHTLY = """run:
  budget_per_execution_usd: "0.00004"
  concurrency: 1
jobs:
  - name: notes
    kind: chat
    model: relay-chat-small
    data: rows.csv
    prompt: '{prompt}'
    request: {max_tokens: 16}
"""


def _quiet_other_deployments(http: httpx.Client) -> None:
    """Earlier tests' deployments keep their schedules (serve leaves them active): pause them and
    drop their scheduled runs, or the scheduler's and the late-runs service's writes every second
    lock the server's SQLite under load and this test's runs wait behind them."""
    for deployment in http.post("/deployments/filter", json={}).json():
        http.patch(f"/deployments/{deployment['id']}", json={"paused": True})
    body = {"flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}}
    for flow_run in http.post("/flow_runs/filter", json=body).json():
        http.delete(f"/flow_runs/{flow_run['id']}")


def _grow(csv: Path, rows: int) -> None:
    lines = ["id,prompt"] + [f"p{n},Summarise paragraph {n}." for n in range(rows)]
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _make_due(http: httpx.Client, flow_run: dict[str, Any], when: datetime) -> None:
    due = {"type": "SCHEDULED", "state_details": {"scheduled_time": when.isoformat()}}
    answer = http.post(f"/flow_runs/{flow_run['id']}/set_state", json={"state": due, "force": True})
    assert answer.status_code in (200, 201), answer.text


def test_an_interval_deployment_over_a_growing_csv_counts_each_night_and_late_runs_end_skipped(
    tmp_path: Path, prefect_server: Server
) -> None:
    """Three nights of an interval deployment while its CSV grows: each execution's own figures in
    serve's lines, the summary artifact, the results and the ledger; the per-night cap stops the
    second night and not the third. Then serve is restarted after three missed nights: no flow run
    fails, one executes, the others end Skipped, and nothing prints a traceback."""
    import pyarrow.parquet as pq

    from relaybatch.engine import CheckpointStore

    http = prefect_server.http
    _quiet_other_deployments(http)
    (tmp_path / "nightly.yaml").write_text(NIGHTLY, encoding="utf-8")
    csv = tmp_path / "rows.csv"
    config = tmp_path / "deployments.yaml"
    config.write_text(
        "deployments:\n"
        "  - name: nightly\n"
        "    flow: run-manifest\n"
        "    interval: 3600\n"
        "    parameters:\n"
        f"      manifest: {tmp_path / 'nightly.yaml'}\n"
        f"      runs_dir: {tmp_path / 'runs'}\n",
        encoding="utf-8",
    )
    env = prefect_server.env
    serve_log, again_log = tmp_path / "serve.log", tmp_path / "serve-again.log"
    again_log.touch()  # named in every wait's failure message
    logs = [prefect_server.log, serve_log, again_log]
    serve = [str(BIN / "relaybatch"), "serve", "--config", str(config)]

    def scheduled() -> list[dict[str, Any]]:
        body = {"flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}, "sort": "EXPECTED_START_TIME_ASC"}
        found = http.post("/flow_runs/filter", json=body).json()
        return [run for run in found if run.get("auto_scheduled")]

    def ended(flow_run: dict[str, Any]) -> dict[str, Any] | None:
        state = http.get(f"/flow_runs/{flow_run['id']}").json()
        return state if state["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None

    nights = []
    with _started(serve, env, serve_log, tmp_path) as serving:
        for rows in (2, 5, 6):  # 2 new; 3 new (the cap lets 2 go); 1 new and the 1 left
            _grow(csv, rows)
            night = _wait_for("a scheduled run", scheduled, START_SECONDS, logs)[0]
            _make_due(http, night, datetime.now(UTC))
            state = _wait_for("the night finished", lambda night=night: ended(night), START_SECONDS, logs)
            assert state["state_type"] == "COMPLETED", state
            nights.append(night["name"])
        os.killpg(serving.pid, signal.SIGINT)
        assert serving.wait(timeout=60) == 0

    served = serve_log.read_text()
    first, second, third = nights
    assert f"execution 1 (schedule {first}): new 2, sent 2, done 2, failed 0, spent 0.0000219" in served
    assert f"execution 2 (schedule {second}): new 3, sent 2, done 2, failed 0, spent 0.0000219" in served
    assert f"execution 3 (schedule {third}): new 1, sent 2, done 2, failed 0, spent 0.0000219" in served
    artifacts = http.post(
        "/artifacts/filter", json={"artifacts": {"key": {"any_": ["relaybatch-nightly-summary"]}}}
    )
    summaries = [artifact["data"] for artifact in artifacts.json()]
    assert any(f"this execution 2 (schedule {second}): new 3, sent 2" in text for text in summaries)
    assert any("stopped early: execution budget of 0.00004 USD reached" in text for text in summaries)
    folder = tmp_path / "runs" / "nightly"
    with CheckpointStore.open_read_only(folder / "checkpoint.sqlite") as store:
        stops = [(row["id"], row["stop_reason"] is not None) for row in reversed(store.executions())]
    assert stops == [(1, False), (2, True), (3, False)]  # the cap stopped night 2, not night 3
    results = pq.read_table(folder / "results" / "notes.parquet").to_pylist()
    assert sorted((row["item_id"], row["execution"]) for row in results) == [
        ("p0", 1),
        ("p1", 1),
        ("p2", 2),
        ("p3", 2),
        ("p4", 3),
        ("p5", 3),
    ]
    ledger = pq.read_table(folder / "ledger.parquet").to_pylist()
    assert sorted(row["execution"] for row in ledger) == [1, 1, 2, 2, 3, 3]

    # Three nights missed while serve was down (due after the last execution started, in the order
    # of the schedule): all due at once when it comes back.
    down = datetime.now(UTC)
    late = _wait_for(
        "three scheduled runs", lambda: scheduled()[:3] if len(scheduled()) >= 3 else None, 60, logs
    )
    for seconds, flow_run in zip((1, 2, 3), late, strict=True):
        _make_due(http, flow_run, down + timedelta(seconds=seconds))
    time.sleep(max(0.0, (down + timedelta(seconds=4) - datetime.now(UTC)).total_seconds()))
    with _started(serve, env, again_log, tmp_path) as serving:
        states = [
            _wait_for("a late run finished", lambda run=run: ended(run), START_SECONDS, logs) for run in late
        ]
        os.killpg(serving.pid, signal.SIGINT)
        serving.wait(timeout=60)
    assert [state["state_type"] for state in states] == ["COMPLETED"] * 3, states
    assert sorted(state["state_name"] for state in states) == ["Completed", "Skipped", "Skipped"], states
    again = again_log.read_text()
    assert "Traceback" not in again and "state Failed" not in again, again[-3000:]
    assert again.count(": skipped: ") == 2, again[-3000:]
    with CheckpointStore.open_read_only(folder / "checkpoint.sqlite") as store:
        assert len(store.executions()) == 4  # one execution caught up the three missed nights


def test_catch_up_latest_asks_the_server_which_missed_run_was_due_last(
    tmp_path: Path, prefect_server: Server
) -> None:
    """`catch_up: latest` against a real server: of three missed runs of an hourly deployment, moved
    to times in the past (as a user can reschedule a run), the two that have a later run due are
    skipped, naming it, and the last one executes. Each is judged by the time it was last scheduled
    for, not by Prefect's ``expected_start_time`` (set once, from the run's first state)."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from relaybatch.flows.catch_up import _caught_up

    from relaybatch.settings import run_paths

    http = prefect_server.http
    _quiet_other_deployments(http)
    flow = http.post("/flows/", json={"name": "catch-up-latest"}).json()
    schedule = {"schedule": {"interval": 3600}, "active": True}
    deployment = http.post(
        "/deployments/", json={"name": "hourly", "flow_id": flow["id"], "schedules": [schedule]}
    )
    assert deployment.status_code in (200, 201), deployment.text
    deployment_id = deployment.json()["id"]
    body = {
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
        "deployments": {"id": {"any_": [deployment_id]}},
        "sort": "EXPECTED_START_TIME_ASC",
    }

    def three_scheduled() -> list[dict[str, Any]] | None:
        found = [run for run in http.post("/flow_runs/filter", json=body).json() if run.get("auto_scheduled")]
        return found[:3] if len(found) >= 3 else None

    try:
        late = _wait_for("three scheduled runs", three_scheduled, 60, [prefect_server.log])
        down = datetime.now(UTC) - timedelta(minutes=10)
        for minutes, flow_run in zip((1, 2, 3), late, strict=True):
            _make_due(http, flow_run, down + timedelta(minutes=minutes))
        runs = [FlowRun.model_validate(http.get(f"/flow_runs/{run['id']}").json()) for run in late]
        assert all(run.expected_start_time > down + timedelta(minutes=3) for run in runs[1:])  # type: ignore[operator]
        paths = run_paths(tmp_path / "runs", "hourly")
        with temporary_settings({PREFECT_API_URL: prefect_server.api}):
            reasons = [_caught_up(paths, run, "latest") for run in runs]
    finally:
        http.delete(f"/deployments/{deployment_id}")
    first, second, last = reasons
    assert first is not None and second is not None and last is None, reasons
    assert f"a later run of this deployment ({runs[2].name}, due " in second
    assert "(catch_up: latest)" in first
