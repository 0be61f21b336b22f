"""One writer per store (relaybatch/run/locking.py): a second execution of the same run or shard,
and a merge while the run or a shard executes, are refused with the holder named; the OS frees the
lock when the holder dies, SIGKILL included.

The lock tests hold it from a helper process; the end-to-end tests run the real `relaybatch run`
in a process of its own against the embedded emulator with slow calls, so it is mid-execution when
the second command comes. The commands beside a holder run in this process (`_command`: the same
CLI app, without a second or two of interpreter start each), except where this process itself holds
the lock (a flow run here): holds nest within one process."""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from relaybatch.run import RunBusy, RunPaths, executing, holder_of
from relaybatch.run.locking import holding
from tests.run.test_graceful_cancel import RELAYBATCH, _counts, _env, _slow_emulator

IN_FLIGHT_SECONDS = 60.0  # a slow emulator's chat latency: far longer than the steps taken meanwhile
CHAT = ("/v1/chat/",)  # only the calls are slow: each refused run checks the catalog first

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from relaybatch.run import RunPaths, executing
    from relaybatch.run.locking import holding
    folder = Path(sys.argv[1])
    if sys.argv[2:] == ["execute"]:
        held = executing(RunPaths(folder))
    elif sys.argv[2:] == ["report"]:
        from relaybatch.run.locking import refreshing_ledger
        held = refreshing_ledger(folder)
    elif sys.argv[2:] == ["merge"]:
        from relaybatch.run.locking import merging
        held = merging(RunPaths(folder), [])
    else:
        held = holding(folder, "executing run 'held'", "wait")
    with held:
        print("held", flush=True)
        sys.stdin.read()  # until the test closes stdin, or kills this process
    """
)


class HelperHolder:
    """Another process holding ``folder``'s lock until stopped."""

    def __init__(self, folder: Path, *mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder), *mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # returns once the lock is held (or the helper died)
        assert line.strip() == "held", self.process.communicate()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.communicate()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[HelperHolder]:
    helper = HelperHolder(tmp_path / "run")
    try:
        yield helper
    finally:
        helper.kill()


def test_a_second_holder_is_refused_naming_the_first_until_a_sigkill_frees_it(
    held: HelperHolder, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    with pytest.raises(RunBusy) as refused, holding(folder, "executing run 'second'", "Wait for it."):
        pass
    message = str(refused.value)
    assert f"executing run 'held': pid {held.process.pid}" in message
    assert message.endswith("Wait for it.")
    holder = holder_of(folder)
    assert holder is not None and holder.pid == held.process.pid and holder.activity == "executing run 'held'"

    held.kill()  # no clean-up code runs: the OS drops the lock with the process
    assert holder_of(folder) is None
    with executing(RunPaths(folder)):
        holder = holder_of(folder)
        assert holder is not None and holder.pid == os.getpid() and holder.activity == "executing run 'run'"
    assert holder_of(folder) is None


def test_nested_holds_in_one_process_share_the_lock_and_the_last_one_out_frees_it(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    with executing(paths), executing(paths):  # `relaybatch run` holds it around plan, execute, export
        pass
    with executing(paths):
        pass
    HelperHolder(paths.root).kill()  # another process gets it: nothing of this process holds it


def test_looking_at_the_lock_takes_nothing_from_anyone(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    assert holder_of(paths.root) is None  # no lock file yet
    with executing(paths):
        pass
    assert holder_of(paths.root) is None  # the file stays; nobody holds it
    assert (paths.root / "execution.lock").exists()


def test_a_shard_is_described_as_a_shard(held: HelperHolder, tmp_path: Path) -> None:
    shard = RunPaths(tmp_path / "big" / "shards" / "2-of-3")
    with executing(shard):
        holder = holder_of(shard.root)
        assert holder is not None and holder.activity == "executing shard 2/3 of run 'big'"


def test_the_run_executed_whole_and_its_shards_never_execute_at_once(tmp_path: Path) -> None:
    """The run executed whole folds its shards' stores and sends what is pending there: beside an
    executing shard it sent the shard's items a second time (135 of 135 in a try by hand)."""
    run = RunPaths(tmp_path / "big")
    first, second = (RunPaths(run.shards / f"{index}-of-2") for index in (1, 2))
    shard = HelperHolder(first.root, "execute")
    try:
        with pytest.raises(RunBusy) as refused, executing(run):
            pass
        message = str(refused.value)
        holder = f"executing shard 1/2 of run 'big': pid {shard.process.pid}"
        assert f"run 'big' has shards executing ({holder}" in message
        assert "send their items a second time" in message and "--shard" in message
        with executing(second):  # the other shard of the split: disjoint items, side by side
            pass
    finally:
        shard.kill()
    whole = HelperHolder(run.root, "execute")
    try:
        with pytest.raises(RunBusy) as refused, executing(second):
            pass
        message = str(refused.value)
        assert "shard 2/2 of run 'big' would send items that run 'big', executed whole" in message
        assert f"executing run 'big': pid {whole.process.pid}" in message
    finally:
        whole.kill()
    with executing(run), executing(run):  # nested in one process, as `relaybatch run` holds it
        pass


def test_shards_of_two_splits_never_execute_at_once(tmp_path: Path) -> None:
    run = RunPaths(tmp_path / "big")
    halves = HelperHolder(run.shards / "1-of-2", "execute")
    try:
        with pytest.raises(RunBusy) as refused, executing(RunPaths(run.shards / "1-of-3")):
            pass
        message = str(refused.value)
        assert "shard 1/3 of run 'big' shares items with a shard of another split" in message
        assert f"executing shard 1/2 of run 'big': pid {halves.process.pid}" in message
        with executing(RunPaths(run.shards / "2-of-2")):  # its own split: side by side
            pass
    finally:
        halves.kill()
    with executing(RunPaths(run.shards / "1-of-3")):  # the other split has finished
        pass


# -- the real commands ---------------------------------------------------------------------------


class SlowRun:
    """`relaybatch run` (or a shard of it) in its own process group, mid-execution on a slow emulator."""

    def __init__(self, manifest: Path, runs: Path, emulator: Path, *extra: str) -> None:
        self.command = [RELAYBATCH, "run", str(manifest), "--runs-dir", str(runs), *extra]
        self.process = subprocess.Popen(
            self.command,
            env=_env(emulator),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def wait_until_sending(self, checkpoint: Path) -> None:
        """Until the store shows requests in flight (the emulator holds each for two seconds)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if _counts(checkpoint).get("sending", 0) > 0:
                return
            assert self.process.poll() is None, self.process.communicate()
            time.sleep(0.2)
        raise AssertionError(f"the run did not start sending: {_counts(checkpoint)}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate()


def _relaybatch(*arguments: str, emulator: Path) -> subprocess.CompletedProcess[str]:
    """`relaybatch ...` in a process of its own (needed where this process holds the lock)."""
    return subprocess.run(
        [RELAYBATCH, *arguments], env=_env(emulator), capture_output=True, text=True, timeout=300
    )


def _command(*arguments: str, emulator: Path) -> subprocess.CompletedProcess[str]:
    """`relaybatch ...` in this process (no interpreter start and imports, a second or two each),
    with the environment a subprocess would get (`_env`) and an embedded emulator of its own. Only
    where the lock's holder, if any, is another process: this process's own holds nest (`executing`).
    An exception the command did not handle fails here: it is the traceback a process would print."""
    from typer.testing import CliRunner

    from relaybatch.cli import app
    from relaybatch.connect import forget_embedded_emulators

    wanted = _env(emulator)
    env: dict[str, str | None] = {name: None for name in os.environ if name not in wanted}
    env |= {name: value for name, value in wanted.items() if os.environ.get(name) != value}
    forget_embedded_emulators()  # a new process would build its emulator afresh
    try:
        result = CliRunner().invoke(app, list(arguments), env=env, terminal_width=400)
    finally:
        forget_embedded_emulators()
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    command = [RELAYBATCH, *arguments]
    return subprocess.CompletedProcess(command, result.exit_code, result.stdout, result.stderr)


def _write_manifest(path: Path, rows: int) -> Path:
    path.write_text(
        "id,model,prompt\n" + "".join(f"q{n},relay-chat-small,Say {n}\n" for n in range(rows)),
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_merge_and_a_second_run_are_refused_while_the_run_executes_and_free_after_a_sigkill(
    tmp_path: Path,
) -> None:
    # Calls take a minute: the first wave is still in flight through every step below (a call
    # listed in flight must still be in flight when it is settled, also on a loaded machine).
    fast, slow = _slow_emulator(tmp_path, 0), _slow_emulator(tmp_path, IN_FLIGHT_SECONDS, CHAT)
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 4)
    for shard in ("1/2", "2/2"):
        done = _command("run", str(manifest), "--runs-dir", str(runs), "--shard", shard, emulator=fast)
        assert done.returncode == 0, done.stderr
    _write_manifest(manifest, 400)  # the same run, edited: the unsharded execution has work to do
    run = SlowRun(manifest, runs, slow)
    try:
        run.wait_until_sending(runs / "many" / "checkpoint.sqlite")
        holder = f"executing run 'many': pid {run.process.pid}"

        merged = _command("merge", "many", "--runs-dir", str(runs), emulator=slow)
        assert merged.returncode == 1
        assert holder in merged.stderr and "Merge once it has finished" in merged.stderr
        assert "Traceback" not in merged.stderr

        second = _command("run", str(manifest), "--runs-dir", str(runs), emulator=slow)
        assert second.returncode == 1
        assert holder in second.stderr and "send the same items twice" in second.stderr
        assert "Traceback" not in second.stderr

        status = _command("status", "many", "--runs-dir", str(runs), emulator=slow)
        assert f"executing now: {holder}" in status.stdout

        # Its calls in flight have no answer yet: listed as such, and not settled from a bill.
        listed = _command("resolve", "many", "--runs-dir", str(runs), emulator=slow)
        assert listed.returncode == 0 and f"executing now: {holder}" in listed.stdout
        in_flight = re.search(r"[0-9a-f]{32}:attempt-\d+", listed.stdout)
        assert in_flight is not None, listed.stdout
        settled = _command(
            "resolve", "many", in_flight[0], "--not-charged", "--runs-dir", str(runs), emulator=slow
        )
        assert settled.returncode == 1 and holder in settled.stderr, settled.stderr
        assert "settle a call from the bill once the execution has finished" in settled.stderr
        assert "Traceback" not in settled.stderr
    finally:
        run.kill()

    assert holder_of(runs / "many") is None  # the OS released it with the killed process
    merged = _command("merge", "many", "--runs-dir", str(runs), emulator=fast)
    assert merged.returncode == 0, merged.stderr
    status = _command("status", "many", "--runs-dir", str(runs), emulator=fast)
    assert "did not finish: its process died or was killed" in status.stdout


@pytest.mark.slow
def test_the_same_shard_twice_is_refused_and_merge_waits_for_the_shard(tmp_path: Path) -> None:
    slow = _slow_emulator(tmp_path, IN_FLIGHT_SECONDS, CHAT)  # the shard executes through every step
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 400)
    shard = SlowRun(manifest, runs, slow, "--shard", "1/2")
    try:
        shard.wait_until_sending(runs / "many" / "shards" / "1-of-2" / "checkpoint.sqlite")
        holder = f"executing shard 1/2 of run 'many': pid {shard.process.pid}"

        again = _command("run", str(manifest), "--runs-dir", str(runs), "--shard", "1/2", emulator=slow)
        assert again.returncode == 1 and holder in again.stderr, again.stderr

        merged = _command("merge", "many", "--runs-dir", str(runs), emulator=slow)
        assert merged.returncode == 1 and holder in merged.stderr, merged.stderr
        assert not (runs / "many" / "checkpoint.sqlite").exists()  # nothing merged half-done

        whole = _command("run", str(manifest), "--runs-dir", str(runs), emulator=slow)
        assert whole.returncode == 1 and holder in whole.stderr, whole.stderr
        assert "send their items a second time" in whole.stderr and "Traceback" not in whole.stderr
        assert not (runs / "many" / "checkpoint.sqlite").exists()  # refused before anything is written
    finally:
        shard.kill()
    merged = _command("merge", "many", "--runs-dir", str(runs), emulator=slow)
    assert merged.returncode == 0, merged.stderr


# -- the seams: export, and the deployment flow between plan and execute ---------------------------


def _finished_run(tmp_path: Path, rows: int = 3, *, in_process: bool = True) -> tuple[Path, Path]:
    """(runs folder, manifest) of a run of ``rows`` items, finished by `relaybatch run` (in a
    subprocess for async tests: the command runs its own event loop)."""
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", rows)
    command = _command if in_process else _relaybatch
    done = command("run", str(manifest), "--runs-dir", str(runs), emulator=_slow_emulator(tmp_path, 0))
    assert done.returncode == 0, done.stderr
    return runs, manifest


@pytest.mark.slow
def test_export_beside_another_process_executing_the_run_writes_a_snapshot_and_works_after(
    tmp_path: Path,
) -> None:
    runs, _ = _finished_run(tmp_path)
    results = runs / "many" / "results" / "many.parquet"
    results.unlink()
    emulator = _slow_emulator(tmp_path, 0)
    holder = HelperHolder(runs / "many")  # what a `relaybatch run` (or merge) of it holds
    try:
        beside = _command("export", "many", "--runs-dir", str(runs), emulator=emulator)
        assert beside.returncode == 0, beside.stderr
        assert f"executing run 'held': pid {holder.process.pid}" in beside.stderr
        assert "exporting a snapshot beside it" in beside.stderr
        assert "Traceback" not in beside.stderr
        assert f"results: {runs / 'many' / 'snapshot' / 'results' / 'many.parquet'}" in beside.stdout
        assert not results.exists()  # the execution's own files are left to it
    finally:
        holder.kill()
    exported = _command("export", "many", "--runs-dir", str(runs), emulator=emulator)
    assert exported.returncode == 0, exported.stderr
    assert f"results: {results}" in exported.stdout and results.exists()


def test_an_export_says_what_it_does_to_whoever_it_refuses(tmp_path: Path) -> None:
    from relaybatch.run.locking import exporting

    paths = RunPaths(tmp_path / "big")
    with exporting(paths):
        holder = holder_of(paths.root)
        assert holder is not None and holder.activity == "exporting the results of run 'big'"
        with executing(paths):  # `relaybatch run` exports inside its own execution's hold
            pass
    with executing(paths), exporting(paths):
        holder = holder_of(paths.root)
        assert holder is not None and holder.activity == "executing run 'big'"


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
async def test_the_run_flow_holds_the_lock_from_plan_to_execute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment's flow run plans, then executes: a second `relaybatch run` of the same
    manifest started between the two is refused, instead of planning and sending in the gap."""
    # The module (the package's ``run_manifest`` is the flow of the same name).
    flows = importlib.import_module("relaybatch.flows.run_manifest")
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 3)
    emulator = _slow_emulator(tmp_path, 0)
    plan = flows.plan_items
    between: list[subprocess.CompletedProcess[str]] = []

    def plan_then_race(*arguments: object, **keywords: object) -> object:
        planned = plan(*arguments, **keywords)
        between.append(_relaybatch("run", str(manifest), "--runs-dir", str(runs), emulator=emulator))
        return planned

    monkeypatch.setattr(flows, "plan_items", plan_then_race)
    outcome = await flows.run_manifest(manifest, runs_dir=runs)

    [second] = between
    assert second.returncode == 1, second.stderr
    assert f"executing run 'many': pid {os.getpid()}" in second.stderr
    assert "send the same items twice" in second.stderr and "Traceback" not in second.stderr
    assert outcome.counts == {"done": 3} and outcome.sent == 3  # this flow run sent them, not the other


TRY_TO_HOLD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from relaybatch.run import RunBusy, RunPaths, executing
    try:
        with executing(RunPaths(Path(sys.argv[1]))):
            print("took it")
    except RunBusy:
        print("refused")
    """
)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
async def test_the_resume_flow_holds_the_lock_through_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's spend figures refresh the run's ledger: another execution must not start
    before it is written (the flow used to release the lock after the export)."""
    flows = importlib.import_module("relaybatch.flows.run_manifest")  # the module, not the flow
    runs, _ = _finished_run(tmp_path, in_process=False)
    publish = flows.publish_summary
    seen: list[str] = []

    async def publish_then_try(*arguments: object, **keywords: object) -> None:
        probe = [sys.executable, "-c", TRY_TO_HOLD, str(runs / "many")]
        seen.append(subprocess.run(probe, capture_output=True, text=True, timeout=120).stdout.strip())
        await publish(*arguments, **keywords)

    monkeypatch.setattr(flows, "publish_summary", publish_then_try)
    await flows.resume_run("many", runs_dir=runs)

    assert seen == ["refused"]


@pytest.mark.slow
def test_a_run_refused_by_a_report_rewriting_the_ledger_is_told_to_retry_in_a_moment(tmp_path: Path) -> None:
    """A `relaybatch report` holds a run folder's lock only while it rewrites the ledger: a run
    (or anything else) refused meanwhile names the report and its pid and is told to run again in a
    moment (was: the advice for an execution, "would send the same items twice ... stop it"), and
    `status` does not call the report an execution."""
    runs, manifest = _finished_run(tmp_path)
    emulator = _slow_emulator(tmp_path, 0)
    report = HelperHolder(runs / "many", "report")  # holds it as `relaybatch report` does
    try:
        refused = _command("run", str(manifest), "--runs-dir", str(runs), emulator=emulator)
        assert refused.returncode == 1, refused.stdout
        assert f"a report rewriting the cost ledger of run 'many': pid {report.process.pid}" in refused.stderr
        assert "run this command again in a moment" in refused.stderr
        assert "send the same items twice" not in refused.stderr and "Traceback" not in refused.stderr
        status = _command("status", "many", "--runs-dir", str(runs), emulator=emulator)
        assert status.returncode == 0 and "executing now" not in status.stdout
        assert "last execution finished" in status.stdout
    finally:
        report.kill()
    again = _command("run", str(manifest), "--runs-dir", str(runs), emulator=emulator)
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
async def test_the_run_flows_summary_leaves_each_shards_ledger_to_its_owner_held_or_not(
    tmp_path: Path,
) -> None:
    """The whole run's flow summary never writes a shard folder's ledger Parquet (the storage
    contract, docs/prefect.md: a shard's files are its owner's, written when its execution ends):
    not a shard held meanwhile (here by a report), and not a free one either; the summary neither
    waits for the held one nor fails."""
    from relaybatch.flows import run_manifest

    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 6)
    emulator = _slow_emulator(tmp_path, 0)
    for shard in ("1/2", "2/2"):
        done = _relaybatch("run", str(manifest), "--runs-dir", str(runs), "--shard", shard, emulator=emulator)
        assert done.returncode == 0, done.stderr
    held, free = (runs / "many" / "shards" / f"{n}-of-2" / "ledger.parquet" for n in (1, 2))
    held.unlink()
    free.unlink()
    report = HelperHolder(held.parent, "report")
    try:
        outcome = await run_manifest(manifest, runs_dir=runs)
        assert not held.exists()  # its holder's to write, not the summary's
    finally:
        report.kill()
    assert outcome.counts == {"done": 6}
    assert not free.exists()  # its owner's too: written when its execution ends, by that host


@pytest.mark.slow
def test_whoever_a_merge_refuses_is_told_to_wait_for_the_merge_not_for_an_execution(tmp_path: Path) -> None:
    """A `relaybatch merge` holds the run's lock while it folds and exports: a run or a settling
    refused meanwhile (an export writes a snapshot beside it) names the merge and is told a merge
    sends nothing and to run again once it has finished (was: the advice for an execution, "would
    send the same items twice ... stop it"); `status` and `resolve` do not call the merge an
    execution."""
    from relaybatch.costs.ledger import CostStore
    from tests.costs.cost_builders import unknown_video_row

    runs, manifest = _finished_run(tmp_path)
    store = CostStore(runs / "many" / "costs.sqlite")
    try:  # a call of unknown outcome to settle
        store.record(unknown_video_row("clips", "v1", "0123", call="attempt-1"))
    finally:
        store.close()
    emulator = _slow_emulator(tmp_path, 0)
    merge = HelperHolder(runs / "many", "merge")  # holds it as `relaybatch merge` does
    try:
        holder = f"merging the shards of run 'many': pid {merge.process.pid}"
        # An export beside it writes a snapshot instead (a consistent read; it sends nothing either).
        beside = _command("export", "many", "--runs-dir", str(runs), emulator=emulator)
        assert beside.returncode == 0, beside.stderr
        assert holder in beside.stderr and "exporting a snapshot beside it" in beside.stderr
        for command in (
            ["run", str(manifest)],
            ["resolve", "many", "0123:attempt-1", "--not-charged"],
        ):
            refused = _command(*command, "--runs-dir", str(runs), emulator=emulator)
            assert refused.returncode == 1, (command, refused.stdout)
            assert holder in refused.stderr, (command, refused.stderr)
            assert "A merge sends nothing" in refused.stderr and "once the execution" not in refused.stderr
            assert "send the same items twice" not in refused.stderr and "Traceback" not in refused.stderr
        status = _command("status", "many", "--runs-dir", str(runs), emulator=emulator)
        assert status.returncode == 0 and "executing now" not in status.stdout
        assert f"in use now: {holder}" in status.stdout
        listed = _command("resolve", "many", "--runs-dir", str(runs), emulator=emulator)
        assert listed.returncode == 0 and "executing now" not in listed.stdout, listed.stdout
        # A merge writes no ledger: a report beside it says so (was: "left for that process to write").
        report = _command("report", "many", "--runs-dir", str(runs), emulator=emulator)
        assert report.returncode == 0, report.stderr
        assert f"{holder}" in report.stdout and "left for that process" not in report.stdout
        assert "does not write ledger.parquet: run the report again once it has finished" in report.stdout
    finally:
        merge.kill()
    again = _command("run", str(manifest), "--runs-dir", str(runs), emulator=emulator)
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
def test_resolve_lists_and_settles_a_shards_calls_each_under_that_shards_lock(tmp_path: Path) -> None:
    """A shard killed with calls in flight leaves them in its own cost store: `relaybatch resolve RUN`
    lists them with their store (1/2), before any merge (was: "only shard stores so far", and the
    run's own store alone was read), and settles one there under the shard's lock: refused, naming
    the holder, while the shard executes; then recorded in the shard's store and ledger."""
    import pyarrow.parquet as pq

    slow = _slow_emulator(tmp_path, 2.0, CHAT)  # calls in flight; the catalog quick
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 400)
    folder = runs / "many" / "shards" / "1-of-2"
    shard = SlowRun(manifest, runs, slow, "--shard", "1/2")
    try:
        shard.wait_until_sending(folder / "checkpoint.sqlite")
    finally:
        shard.kill()  # SIGKILL: its calls in flight stay reserved in the shard's cost store

    listed = _command("resolve", "many", "--runs-dir", str(runs), emulator=slow)
    assert listed.returncode == 0, listed.stderr
    calls = re.findall(r"([0-9a-f]{32}:attempt-\d+)\s*│\s*1/2\s*│", listed.stdout)
    assert calls, listed.stdout
    assert f"{len(calls)} call(s) sent with no answer recorded" in listed.stdout
    assert not (runs / "many" / "costs.sqlite").exists()  # the run's own store: none yet

    execution = HelperHolder(folder, "execute")  # the shard executing again
    try:
        refused = _command(
            "resolve", "many", calls[0], "--charged", "0.40", "--runs-dir", str(runs), emulator=slow
        )
        assert refused.returncode == 1, refused.stdout
        assert f"executing shard 1/2 of run 'many': pid {execution.process.pid}" in refused.stderr
        assert "settle a call from the bill once the execution has finished" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        execution.kill()

    for store in ("run", "2/2"):
        absent = _command(
            "resolve",
            "many",
            calls[0],
            "--not-charged",
            "--store",
            store,
            "--runs-dir",
            str(runs),
            emulator=slow,
        )
        assert absent.returncode == 1 and "has no cost ledger" in absent.stderr, absent.stderr
    settled = _command(
        "resolve", "many", calls[0], "--charged", "0.40", "--runs-dir", str(runs), emulator=slow
    )
    assert settled.returncode == 0, settled.stderr
    assert f"{calls[0]} (shard 1/2): charged $0.40" in settled.stdout
    again = _command("resolve", "many", "--store", "1/2", "--runs-dir", str(runs), emulator=slow)
    assert f"{len(calls) - 1} call(s) sent with no answer recorded" in again.stdout, again.stdout
    assert calls[0] not in again.stdout
    key, call = calls[0].split(":")
    ledger = pq.read_table(folder / "ledger.parquet", columns=["item_key", "call", "outcome", "usd"])
    rows = [row for row in ledger.to_pylist() if (row["item_key"], row["call"]) == (key, call)]
    assert [(row["outcome"], row["usd"]) for row in rows] == [("charged", Decimal("0.40"))], rows
