"""Stopping a run: Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM
stop cleanly and resumably, a second Ctrl-C stops at once, and a SIGKILL leaves no process behind.

The subprocess tests run the real `relaybatch run` against the embedded emulator with a second of
latency on every chat call, so requests are in flight when the signal arrives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from relaybatch.run.stopping import stop_on_signals
from tests.conftest import REPO_ROOT

RELAYBATCH = str(Path(sys.executable).parent / "relaybatch")
# A run of ITEMS chat items at one second a call and at most CONCURRENCY (the manifest default) in
# flight lasts at least ITEMS / CONCURRENCY = 50 s: far longer than it takes to get going and stop.
ITEMS = 800
CONCURRENCY = 16
CHAT_CALLS = ("/v1/chat/",)  # the slow routes: the catalog and pricing reads before them stay quick


async def test_the_first_signal_sets_stop_and_the_second_cancels_at_once() -> None:
    stop = asyncio.Event()
    notices: list[str] = []

    async def engine() -> str:
        await stop.wait()  # stop submitting...
        await asyncio.sleep(30)  # ...and wait for "requests in flight" that take long
        return "stopped cleanly"

    work = asyncio.ensure_future(engine())
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals(stop, work, notices.append) as handling:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.1)
        assert stop.is_set() and handling.signal == "SIGTERM" and not work.done()
        assert "stopping (SIGTERM)" in notices[0]
        os.kill(os.getpid(), signal.SIGTERM)  # a supervisor repeating itself: the stop goes on
        await asyncio.sleep(0.1)
        assert not work.done() and not handling.forced
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: at once
        with pytest.raises(asyncio.CancelledError):
            await work
        assert handling.forced and handling.forced_by == "a second Ctrl-C"
    assert signal.getsignal(signal.SIGINT) is before  # Python's KeyboardInterrupt handler is back


async def test_when_the_grace_period_runs_out_the_stop_is_forced_and_says_why() -> None:
    stop = asyncio.Event()
    notices: list[str] = []

    async def engine() -> None:
        await stop.wait()
        await asyncio.sleep(30)  # requests in flight that outlast the grace period

    work = asyncio.ensure_future(engine())
    with stop_on_signals(stop, work, notices.append, grace=0.1) as handling:
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(asyncio.CancelledError):
            await work  # cancelled by the grace timer: no second signal came
    assert handling.forced and handling.forced_by == "the 0.1 s grace period ran out"
    assert "waiting up to 0.1 s for those in flight" in notices[0]


async def test_without_a_signal_nothing_happens() -> None:
    stop = asyncio.Event()
    work = asyncio.ensure_future(asyncio.sleep(0, result="done"))
    with stop_on_signals(stop, work, lambda text: None) as handling:
        assert await work == "done"
    assert handling.signal is None and not handling.forced and not stop.is_set()


# -- a real `relaybatch run` in its own process group -------------------------------------------


def _slow_emulator(tmp_path: Path, latency: float, paths: tuple[str, ...] = ()) -> Path:
    """An emulator config whose answers take ``latency`` seconds (only on routes starting with one
    of ``paths``, when given: the catalog a run checks first can stay quick)."""
    config = yaml.safe_load((REPO_ROOT / "configs" / "emulator.yaml").read_text())
    rule = {"fault": f"latency={latency}", "rate": 1.0, "paths": list(paths)}
    config["faults"] = {"seed": 0, "rules": [rule]} if latency else {}
    path = tmp_path / f"emulator-{latency}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _manifest(tmp_path: Path, items: int = ITEMS) -> Path:
    rows = "".join(f"q{n},relay-chat-small,Say {n}\n" for n in range(items))
    path = tmp_path / "many.csv"
    path.write_text("id,model,prompt\n" + rows, encoding="utf-8")
    return path


def _env(emulator_config: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RELAYBATCH_"))}
    env["RELAYBATCH_EMULATOR_CONFIG"] = str(emulator_config)
    env["PREFECT_HOME"] = str(emulator_config.parent / "prefect-home")  # unused without a server
    env.update(extra or {})
    return env


def _counts(checkpoint: Path) -> dict[str, int]:
    if not checkpoint.exists():
        return {}
    connection = sqlite3.connect(f"{checkpoint.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return dict(connection.execute("select state, count(*) from items group by state").fetchall())
    except sqlite3.OperationalError:  # tables not created yet
        return {}
    finally:
        connection.close()


def under_way(counts: dict[str, int]) -> bool:
    """Mid-run at full width: some items answered and a whole concurrency's worth in flight (the
    limiter opens up to it within a few waves of answers), so a stop meets requests on the wire."""
    return counts.get("done", 0) > 0 and counts.get("sending", 0) >= CONCURRENCY


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Run:
    def __init__(self, tmp_path: Path, latency: float, env: dict[str, str] | None = None) -> None:
        self.manifest = _manifest(tmp_path)
        self.runs = tmp_path / "runs"
        self.checkpoint = self.runs / "many" / "checkpoint.sqlite"
        self.command = [RELAYBATCH, "run", str(self.manifest), "--runs-dir", str(self.runs)]
        self.process = subprocess.Popen(
            self.command,
            env=_env(_slow_emulator(tmp_path, latency, CHAT_CALLS), env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )

    def wait_until_sending(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if under_way(_counts(self.checkpoint)):
                return
            assert self.process.poll() is None, self.process.communicate()
            time.sleep(0.2)
        raise AssertionError(f"the run did not get going: {_counts(self.checkpoint)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate()


@pytest.fixture
def slow_run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path, latency=1.0)
    try:
        yield run
    finally:
        run.stop()


def _resume_fast(run: Run, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run.command, env=_env(_slow_emulator(tmp_path, 0)), capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_within_10_s_resumable(slow_run: Run, tmp_path: Path) -> None:
    slow_run.wait_until_sending()
    os.killpg(slow_run.process.pid, signal.SIGINT)
    sent = time.monotonic()
    out, err = slow_run.process.communicate(timeout=30)
    took = time.monotonic() - sent
    text = out.decode() + err.decode()

    assert slow_run.process.returncode == 130, text
    assert took < 10, f"took {took:.1f} s to stop"
    assert "Traceback" not in text
    assert f"resume with: relaybatch run {slow_run.manifest} --runs-dir {slow_run.runs}" in text
    counts = _counts(slow_run.checkpoint)
    assert counts.get("sending", 0) == 0 and counts.get("uncertain", 0) == 0, counts
    assert 0 < counts["done"] < ITEMS

    resumed = _resume_fast(slow_run, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _counts(slow_run.checkpoint) == {"done": ITEMS}


@pytest.mark.slow
def test_sigterm_mid_run_is_a_clean_stop_with_no_new_uncertain_item(slow_run: Run) -> None:
    slow_run.wait_until_sending()
    slow_run.process.send_signal(signal.SIGTERM)
    out, err = slow_run.process.communicate(timeout=30)
    text = out.decode() + err.decode()

    assert slow_run.process.returncode == 130, text
    assert "stopped by SIGTERM" in text and "Traceback" not in text
    counts = _counts(slow_run.checkpoint)
    assert counts.get("sending", 0) == 0 and counts.get("uncertain", 0) == 0, counts


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_the_checkpoint_stays_consistent(
    slow_run: Run, tmp_path: Path
) -> None:
    slow_run.wait_until_sending()
    os.killpg(slow_run.process.pid, signal.SIGINT)
    time.sleep(0.2)
    os.killpg(slow_run.process.pid, signal.SIGINT)
    sent = time.monotonic()
    out, err = slow_run.process.communicate(timeout=30)
    text = out.decode() + err.decode()

    assert slow_run.process.returncode == 130, text
    assert time.monotonic() - sent < 5
    assert "Traceback" not in text and "stopped at once (a second Ctrl-C)" in text
    from tests.run.test_execution_lock import _command  # it imports this module

    # The stopped run's status, read in this process (the same environment, no process start).
    fast = _slow_emulator(tmp_path, 0)
    status = _command("status", "many", "--runs-dir", str(slow_run.runs), emulator=fast)
    assert "stopped early" in status.stdout and "stopped at once (a second Ctrl-C)" in status.stdout
    # Requests cut off in flight may have been billed: the resume reports them, never resends them.
    resumed = _resume_fast(slow_run, tmp_path)
    counts = _counts(slow_run.checkpoint)
    assert counts.get("sending", 0) == 0 and counts["done"] + counts.get("uncertain", 0) == ITEMS
    # Exit 0 only when every item is done; uncertain items make it 1, with the reason and resume line.
    assert resumed.returncode == (1 if counts.get("uncertain") else 0), resumed.stderr


@pytest.mark.slow
def test_sigkill_of_the_runner_leaves_no_process_behind(slow_run: Run) -> None:
    slow_run.wait_until_sending()
    started = _children(slow_run.process.pid)
    os.killpg(slow_run.process.pid, signal.SIGKILL)
    slow_run.process.communicate(timeout=30)
    deadline = time.monotonic() + 10  # the kernel reaps them at once; a loaded machine, in seconds
    while [pid for pid in started if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in started if _alive(pid)]
    # Nothing else of its process group either (a server it started would be in it).
    survivors = [
        entry.name
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _alive(int(entry.name)) and _pgid(int(entry.name)) == slow_run.process.pid
    ]
    assert not survivors


def _pgid(pid: int) -> int | None:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.slow
def test_sigterm_before_the_engine_starts_is_a_clean_stop_too(tmp_path: Path) -> None:
    """While a big manifest is checked and planned, SIGTERM stops like Ctrl-C: exit 130, no traceback.

    The signal goes as the checkpoint appears (checking done, planning under way): 20,000 rows take
    seconds to check, 200,000 took 18 s and proved no more."""
    rows = "".join(f"q{n},relay-chat-small,Say {n}\n" for n in range(20_000))
    manifest = tmp_path / "big.csv"
    manifest.write_text("id,model,prompt\n" + rows, encoding="utf-8")
    process = subprocess.Popen(
        [RELAYBATCH, "run", str(manifest), "--runs-dir", str(tmp_path / "runs")],
        env=_env(_slow_emulator(tmp_path, 1.0)),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        checkpoint = tmp_path / "runs" / "big" / "checkpoint.sqlite"
        deadline = time.monotonic() + 120
        while not checkpoint.exists():  # planning: the items are being added now
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err and f"resume with: relaybatch run {manifest}" in err
    assert "nothing was in flight" in err  # stopped before the engine sent anything


def test_a_signal_after_the_last_answer_stops_nothing_and_the_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the moment between the engine's last answer and its return (counting the states of
    a big run) used to end in "stopped by SIGINT: None", exit 130, for a run that was complete."""
    from typer.testing import CliRunner

    from relaybatch.cli import app
    from relaybatch.run.assemble import OpenRun

    execute = OpenRun.execute

    async def answered_then_signalled(self: OpenRun, *args: object, **kwargs: object) -> object:
        summary = await execute(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.5)  # the handler runs while the engine is still returning
        return summary

    monkeypatch.setattr(OpenRun, "execute", answered_then_signalled)
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\nq2,relay-chat-small,ho\n")
    before = signal.getsignal(signal.SIGINT)

    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(tmp_path / "runs")])

    assert "stopping (SIGINT)" in result.output
    assert "SIGINT came after the last answer was checkpointed: nothing was left to stop" in result.output
    assert "None" not in result.output and "stopped by" not in result.output
    assert result.exit_code == 0, result.output
    assert "items: done 2 (2 new)" in result.output
    assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_while_the_results_are_written_leaves_them_to_the_next_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exports run synchronously inside the event loop, where asyncio's own SIGINT handler only
    cancels the task at its next await, after them: at a million items the Ctrl-C that was to leave
    them to the next run waited half a minute. Now it interrupts them at once."""
    from typer.testing import CliRunner

    from relaybatch.cli import app
    from relaybatch.run import execution

    progress = {"steps": 0}

    def slow_export(*args: object, **kwargs: object) -> list[Path]:
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C as the export begins
        for _ in range(200):  # a long synchronous export, a line of Python at a time
            progress["steps"] += 1
            time.sleep(0.01)
        return []

    monkeypatch.setattr(execution, "export_results", slow_export)
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    before = signal.getsignal(signal.SIGINT)

    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(tmp_path / "runs")])

    assert progress["steps"] < 200, "the export ran to its end before the Ctrl-C was heard"
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output and "resume with: relaybatch" in result.output
    assert signal.getsignal(signal.SIGINT) is before
