"""Partitions by input range through the CLI: each row planned and sent by one partition, once.

Every request is counted at the embedded emulator, so "sent nothing" means nothing reached it.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator
from relaybatch.engine import CheckpointStore

pytestmark = pytest.mark.usefixtures("prefect_harness")

CHATS = ("POST", "/v1/chat/completions")


def chats_sent() -> int:
    return embedded_emulator().state.emulator.request_count(*CHATS)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), terminal_width=400)
    return result.exit_code, result.output


def write_csv(path: Path, ids: range, prompt: str = "Say {n}.") -> Path:
    lines = ["id,model,prompt,max_tokens"] + [f"p{n},relay-chat-small,{prompt.format(n=n)},16" for n in ids]
    path.write_text("\n".join(lines) + "\n")
    return path


def result_ids(path: Path) -> list[str]:
    return sorted(pq.read_table(path, columns=["item_id"]).column("item_id").to_pylist())


def run_partitions(manifest: Path, runs: str, count: int, order: list[int] | None = None) -> None:
    code, output = run("partition", str(manifest), "--partitions", str(count), "--runs-dir", runs)
    assert code == 0, output
    for index in order or range(1, count + 1):
        code, output = run("run", str(manifest), "--partition", f"{index}/{count}", "--runs-dir", runs)
        assert code == 0, output


def test_partitions_send_each_row_once_and_merge_into_one_result_set(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", range(30))
    before = chats_sent()

    run_partitions(manifest, runs, 4)
    code, status = run("status", "bulk", "--runs-dir", runs)  # before the merge: one row each
    assert code == 0, status
    assert "partitions" in status and "relaybatch merge bulk" in status
    assert (
        all(f"{index}/4" in status for index in range(1, 5)) and status.count("last execution finished") == 4
    )
    code, output = run("merge", "bulk", "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before + 30
    assert result_ids(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet") == sorted(
        f"p{n}" for n in range(30)
    )
    code, output = run("run", str(manifest), "--partition", "2/4", "--runs-dir", runs)  # again: a resume
    assert code == 0, output
    assert chats_sent() == before + 30


def test_partitions_after_a_whole_run_send_nothing(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    before = chats_sent()

    run_partitions(manifest, runs, 3)

    assert chats_sent() == before


def test_an_edit_that_moves_the_ranges_sends_only_the_new_rows(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    run_partitions(manifest, runs, 3)
    write_csv(manifest, range(-6, 20))  # six rows in front: every range moves
    before = chats_sent()

    run_partitions(manifest, runs, 3, order=[3, 2, 1])  # later ranges first: they take over rows
    code, output = run("merge", "bulk", "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before + 6
    assert result_ids(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet") == sorted(
        f"p{n}" for n in range(-6, 20)
    )


def unreadable(store: Path) -> None:
    """The SQLite file replaced by bytes that are no database, of the same size and modification
    time: to the stamps the handoff files record, the store is as its owner left it, and any
    attempt to open it fails (as opening another host's store must never be tried)."""
    stat = store.stat()
    store.write_bytes(b"not a database " * (stat.st_size // 15 + 1))
    os.truncate(store, stat.st_size)
    os.utime(store, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def done_in(folder: Path) -> int:
    with CheckpointStore.open_read_only(folder / "checkpoint.sqlite") as store:
        return store.count_by_state().get("done", 0)


def unreadable_stores(folders: list[Path]) -> None:
    for folder in folders:
        for name in ("checkpoint.sqlite", "costs.sqlite"):
            if not (folder / name).exists():
                continue
            wal = folder / f"{name}-wal"
            assert not wal.exists() or wal.stat().st_size == 0  # closed cleanly: all in the file
            wal.unlink(missing_ok=True)
            (folder / f"{name}-shm").unlink(missing_ok=True)
            unreadable(folder / name)


def test_partitions_of_a_new_split_take_over_the_old_splits_rows_from_their_handoff_files(
    tmp_path: Path,
) -> None:
    """After an edit and a new split, the old split's stores may hold the new partitions' rows:
    what they settled comes from the files their owners wrote beside them, not from their SQLite
    (each one here is not even a database any more)."""
    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    run_partitions(manifest, str(runs), 3)
    old = sorted((runs / "bulk" / "shards").iterdir())
    write_csv(manifest, range(-6, 20))  # six rows in front: every range moves
    unreadable_stores(old)
    before = chats_sent()

    run_partitions(manifest, str(runs), 2)

    assert chats_sent() == before + 6
    new = [runs / "bulk" / "shards" / f"part-{index}-of-2" for index in (1, 2)]
    assert sum(done_in(folder) for folder in new) == 26


def test_partitions_bring_back_superseded_items_from_the_runs_handoff_files(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    assert run("run", str(manifest), "--runs-dir", str(runs))[0] == 0
    original = manifest.read_text()
    write_csv(manifest, range(20), prompt="Edited {n}.")  # the same manifest, edited: 20 superseded
    assert run("run", str(manifest), "--runs-dir", str(runs))[0] == 0
    manifest.write_text(original)  # the edit undone
    unreadable_stores([runs / "bulk"])
    before = chats_sent()

    run_partitions(manifest, str(runs), 3)

    assert chats_sent() == before  # the 20 answers from before the edit came back
    assert sum(done_in(folder) for folder in (runs / "bulk" / "shards").iterdir()) == 20


def test_status_shows_each_partition_from_its_files_without_opening_its_stores(tmp_path: Path) -> None:
    """`relaybatch status` of partitions not merged yet: each one's counts, how its execution ended,
    its host and spend come from the files its owner wrote (progress.json, handoff.json), so it
    works from any host; a partition whose store changed since (its execution killed) says so."""
    import json

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    run_partitions(manifest, str(runs), 3)
    folders = sorted((runs / "bulk" / "shards").iterdir())
    spent = [json.loads((folder / "progress.json").read_text())["known_usd"] for folder in folders]
    with CheckpointStore(folders[2] / "checkpoint.sqlite") as store:  # as an execution killed there
        store.record_manifest(str(manifest.resolve()), "changed")
    unreadable_stores(folders[:2])

    code, status = run("status", "bulk", "--runs-dir", str(runs))

    assert code == 0, status
    rows = [line for line in status.splitlines() if line.lstrip("│ ").startswith(("1/3", "2/3", "3/3"))]
    assert len(rows) == 3, status
    assert all("last execution finished" in row and " 4 " in row for row in rows[:2]), status
    assert "store changed since its owner last let go" in rows[2], status
    assert all(float(usd) > 0 for usd in spent)
    total = sum((Decimal(usd) for usd in spent), Decimal(0))
    assert f"spent (known) ${total.quantize(Decimal('0.000001')):,}" in status, status


def test_status_shows_the_state_of_each_partitions_flow_run_on_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from relaybatch.flows import run_manifest

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(6))
    assert run("partition", str(manifest), "--partitions", "2", "--runs-dir", str(runs))[0] == 0
    for index in (1, 2):
        asyncio.run(run_manifest(manifest, runs_dir=runs, partition=f"{index}/2"))
    # The harness's server is this process's (no PREFECT_API_URL): status asks it as a configured one.
    monkeypatch.setattr("relaybatch.prefect_server.configured_api_url", lambda: "harness")
    monkeypatch.setattr("relaybatch.cli._watching.FLOW_RUNS_TIMEOUT_SECONDS", 300.0)  # a loaded machine

    code, status = run("status", "bulk", "--runs-dir", str(runs))

    assert code == 0, status
    rows = [line for line in status.splitlines() if line.lstrip("│ ").startswith(("1/2", "2/2"))]
    assert len(rows) == 2 and all("COMPLETED" in row for row in rows), status
    assert run("merge", "bulk", "--runs-dir", str(runs))[0] == 0
    code, merged = run("status", "bulk", "--runs-dir", str(runs))  # the merged run's, with its partitions
    assert code == 0 and merged.count("COMPLETED") == 2, merged


def test_report_and_dashboard_read_partitions_from_their_files(tmp_path: Path) -> None:
    """`relaybatch report` of partitions (merged or not): their spend comes from the ledger.parquet
    each partition's owner wrote, its items that did not succeed from its handoff.parquet, the
    run's budget from its progress.json; none of their stores is opened."""
    from relaybatch.costs import load_spend

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    run_partitions(manifest, str(runs), 3)
    folders = sorted((runs / "bulk" / "shards").iterdir())
    charged = sum((spend_in(folder) for folder in folders), Decimal(0))
    unreadable_stores(folders)

    code, report = run("report", "bulk", "--runs-dir", str(runs))

    assert code == 0, report
    assert f"{charged.quantize(Decimal('0.000001')):,}" in report, report
    assert (runs / "bulk" / "dashboard.html").is_file()
    assert all((folder / "events.parquet").is_file() for folder in folders)
    spend = load_spend(runs, ["bulk"])
    finished = sum(count for _, count in spend.activity.finished_per_minute)
    assert finished == 12, spend.activity  # the done events of every partition
    code, status = run("status", "bulk", "--runs-dir", str(runs))
    assert code == 0 and "last execution finished" in status, status


def test_status_of_a_run_another_host_merges_reads_only_files(tmp_path: Path) -> None:
    """The run's own store held by a merge or an execution on another host is that host's: status
    shows the holder and the files (the run's progress.json, each partition's), opens no store."""
    import fcntl
    import json

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(9))
    run_partitions(manifest, str(runs), 3)
    assert run("merge", "bulk", "--runs-dir", str(runs))[0] == 0
    unreadable_stores([runs / "bulk", *sorted((runs / "bulk" / "shards").iterdir())])
    lock = runs / "bulk" / "execution.lock"
    holder = {"activity": "merging the shards of run 'bulk'", "merging": True, "pid": 4242, "host": "host-b"}
    lock.write_text(json.dumps(holder))
    descriptor = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as host-b's merge holds it
        code, status = run("status", "bulk", "--runs-dir", str(runs))
        report_code, report = run("report", "bulk", "--runs-dir", str(runs))
    finally:
        os.close(descriptor)

    assert report_code == 0, report
    assert "bulk: merging the shards of run 'bulk': pid 4242 on host-b" in report, report

    assert code == 0, status
    assert "executing now: merging the shards of run 'bulk': pid 4242 on host-b" in status, status
    assert status.count("last execution finished") == 3, status
    assert "done 9" in status, status


def spend_in(folder: Path) -> Decimal:
    import pyarrow.parquet as pq

    return sum(
        pq.read_table(folder / "ledger.parquet", columns=["usd"]).column("usd").to_pylist(), Decimal(0)
    )


def test_a_file_changed_since_the_split_is_refused(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", range(10))
    assert run("partition", str(manifest), "--partitions", "2", "--runs-dir", runs)[0] == 0
    write_csv(manifest, range(11))

    code, output = run("run", str(manifest), "--partition", "1/2", "--runs-dir", runs)

    assert code == 1
    assert "changed since the run was split" in output and "Traceback" not in output
    code, output = run("run", str(manifest), "--partition", "1/3", "--runs-dir", runs)
    assert code == 1 and "relaybatch partition" in output


def test_partitions_bring_back_items_superseded_in_the_run_instead_of_resending_them(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    original = manifest.read_text()
    write_csv(manifest, range(20), prompt="Edited {n}.")  # the same manifest, edited: 20 superseded
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    manifest.write_text(original)  # the edit undone
    before = chats_sent()

    run_partitions(manifest, runs, 3)
    # Folded by a whole run, which plans the manifest again (a merge alone keeps the run store's
    # edited items current beside them: docs/prefect.md, "Scale-out: partitions").
    code, output = run("run", str(manifest), "--runs-dir", runs)

    assert code == 0, output
    assert chats_sent() == before  # the 20 answers from before the edit came back
    assert result_ids(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet") == sorted(
        f"p{n}" for n in range(20)
    )


def test_a_partition_opens_no_store_but_its_own_and_reads_the_others_handoff_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage contract (docs/prefect.md): the partitions of one split never look at each
    other's stores; the run's own store (after a merge) may hold a partition's rows, so its handoff
    files are read (as a scratch store on this host), never its SQLite."""
    import tempfile

    from relaybatch.engine.store.base import StoreBase
    from relaybatch.run.partitions import plan_partition

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    run_partitions(manifest, str(runs), 4)
    opened: list[Path] = []
    original = StoreBase.__init__

    def spy(self: StoreBase, path: Path, *, read_only: bool = False) -> None:
        opened.append(Path(path))
        original(self, path, read_only=read_only)

    monkeypatch.setattr(StoreBase, "__init__", spy)
    own = runs / "bulk" / "shards" / "part-2-of-4" / "checkpoint.sqlite"

    plan_partition(manifest, runs, 2, 4)
    assert set(opened) <= {own}, opened

    assert run("merge", "bulk", "--runs-dir", str(runs))[0] == 0
    assert (runs / "bulk" / "handoff.parquet").is_file() and (runs / "bulk" / "handoff.json").is_file()
    opened.clear()
    plan_partition(manifest, runs, 2, 4)
    scratch = [path for path in opened if path != own]
    assert scratch and all(path.is_relative_to(tempfile.gettempdir()) for path in scratch), opened
    assert not any(path.is_relative_to(runs) for path in scratch), opened


def test_a_partition_validates_its_rows_again_only_when_its_files_changed_since_the_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The split validated every row: a partition of files as they were then plans in one pass; a
    same-size edit since (not refused: the ranges still hold) has its rows validated first."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.manifests import Manifest, ManifestInvalid
    from relaybatch.run.partitions import PartitionSplit, plan_partition

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(10))
    assert run("partition", str(manifest), "--partitions", "2", "--runs-dir", str(runs))[0] == 0
    validated: list[object] = []
    original = Manifest.validate

    def spy(self: Manifest, *args: object, **kwargs: object) -> object:
        validated.append(kwargs.get("starts"))
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Manifest, "validate", spy)

    assert plan_partition(manifest, runs, 1, 2).added == 5
    assert validated == []

    edited = manifest.read_text().replace("Say 1.,16", "Say 1.,ab").replace("Say 7.,16", "Say 7.,ab")
    manifest.write_text(edited)  # the same size
    store = runs / "bulk" / "shards" / "part-2-of-2" / "checkpoint.sqlite"
    with pytest.raises(ManifestInvalid, match=r"bulk.csv:3: max_tokens"):
        plan_partition(manifest, runs, 1, 2)
    assert len(validated) == 1

    # Were the stamps fooled, the plan's own pass would stop at the bad row, adding nothing.
    monkeypatch.setattr(PartitionSplit, "validated_as_they_are", lambda self: True)
    with pytest.raises(ManifestInvalid, match=r"bulk.csv:9: max_tokens"):
        plan_partition(manifest, runs, 2, 2)
    assert len(validated) == 1
    assert not store.exists() or CheckpointStore(store).count_by_state() == {}


def test_status_report_and_dashboard_read_shards_from_their_files(tmp_path: Path) -> None:
    """Shards (`--shard I/N`, by key hash) are under the storage contract like partitions: `status`
    shows each one's counts, ending and spend from its progress and handoff files, `report` and the
    dashboard its charges from its ledger.parquet and its activity from its events.parquet; with
    every shard store replaced by a non-database, none of them is opened."""
    from relaybatch.costs import load_spend

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    for index in (1, 2):
        code, output = run("run", str(manifest), "--shard", f"{index}/2", "--runs-dir", str(runs))
        assert code == 0, output
    folders = sorted((runs / "bulk" / "shards").iterdir())
    assert [folder.name for folder in folders] == ["1-of-2", "2-of-2"]
    done = [done_in(folder) for folder in folders]
    charged = sum((spend_in(folder) for folder in folders), Decimal(0))
    unreadable_stores(folders)

    code, status = run("status", "bulk", "--runs-dir", str(runs))

    assert code == 0, status
    rows = [line for line in status.splitlines() if line.lstrip("│ ").startswith(("shard 1/2", "shard 2/2"))]
    assert len(rows) == 2 and all("last execution finished" in row for row in rows), status
    assert [f" {count} " in row for count, row in zip(done, rows, strict=True)] == [True, True], status
    assert sum(done) == 12
    assert f"spent (known) ${charged.quantize(Decimal('0.000001')):,}" in status, status
    code, report = run("report", "bulk", "--runs-dir", str(runs))
    assert code == 0, report
    assert f"{charged.quantize(Decimal('0.000001')):,}" in report, report
    assert (runs / "bulk" / "dashboard.html").is_file()
    finished = sum(count for _, count in load_spend(runs, ["bulk"]).activity.finished_per_minute)
    assert finished == 12  # the done events of both shards


def split_stores(manifest: Path, runs: Path, how: str) -> list[Path]:
    """The run's items done by its shards (``--shard I/2``) or partitions (``--partition I/3``);
    their store folders."""
    if how == "shards":
        for index in (1, 2):
            code, output = run("run", str(manifest), "--shard", f"{index}/2", "--runs-dir", str(runs))
            assert code == 0, output
    else:
        run_partitions(manifest, str(runs), 3)
    return sorted((runs / "bulk" / "shards").iterdir())


@pytest.mark.parametrize("how", ["shards", "partitions"])
def test_an_unsharded_run_folds_the_shards_and_partitions_from_their_handoff_files(
    tmp_path: Path, how: str
) -> None:
    """An unsharded run folds every shard's and partition's rows into the run's store from the
    files their owners wrote (here their stores are not even databases any more); one whose store
    changed since (an execution killed before it let go) has them written again under its lock for
    a moment first."""
    from relaybatch.run.handoff import current_handoff
    from relaybatch.run_folder import RunPaths

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    folders = split_stores(manifest, runs, how)
    with CheckpointStore(folders[-1] / "checkpoint.sqlite") as store:  # written since it let go
        store.save_run("bulk", store.run_settings())
    assert current_handoff(RunPaths(folders[-1])) is None
    unreadable_stores(folders[:-1])
    before = chats_sent()

    code, output = run("run", str(manifest), "--runs-dir", str(runs))

    assert code == 0, output
    assert chats_sent() == before  # every row came from the stores folded in
    assert done_in(runs / "bulk") == 12
    assert result_ids(runs / "bulk" / "results" / "bulk.parquet") == sorted(f"p{n}" for n in range(12))
    assert current_handoff(RunPaths(folders[-1])) is not None


def test_an_unsharded_run_is_refused_while_another_process_holds_a_changed_partition(tmp_path: Path) -> None:
    """A partition whose store changed since its handoff and whose lock another process holds (its
    execution, on any host) cannot be folded: the run is refused naming that holder, sends nothing."""
    import fcntl
    import json

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(9))
    folders = split_stores(manifest, runs, "partitions")
    with CheckpointStore(folders[1] / "checkpoint.sqlite") as store:
        store.save_run("bulk", store.run_settings())
    holder = {"activity": "executing partition 2/3 of run 'bulk'", "pid": 4242, "host": "host-b"}
    lock = folders[1] / "execution.lock"
    lock.write_text(json.dumps(holder))
    before = chats_sent()
    descriptor = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as host-b's execution holds it
        code, output = run("run", str(manifest), "--runs-dir", str(runs))
    finally:
        os.close(descriptor)

    assert code == 1, output
    assert "executing partition 2/3 of run 'bulk': pid 4242 on host-b" in output, output
    assert "run this command again once it has ended" in output and "Traceback" not in output, output
    assert chats_sent() == before
    assert run("run", str(manifest), "--runs-dir", str(runs))[0] == 0  # once it has let go
    assert chats_sent() == before and done_in(runs / "bulk") == 9
