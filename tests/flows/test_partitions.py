"""Partitions by input range through the CLI: each row planned and sent by one partition, once.

Every request is counted at the embedded emulator, so "sent nothing" means nothing reached it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator

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


def test_a_partition_opens_no_store_of_its_own_split_only_those_that_may_hold_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage contract (docs/prefect.md): the partitions of one split never open each other's
    SQLite; the run's own store (after a merge) may hold a partition's rows, so it is read."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.run.partitions import plan_partition

    runs = tmp_path / "runs"
    manifest = write_csv(tmp_path / "bulk.csv", range(20))
    run_partitions(manifest, str(runs), 4)
    opened: list[Path] = []
    original = CheckpointStore.open_read_only.__func__  # type: ignore[attr-defined]

    def spy(cls: type[CheckpointStore], path: Path, *args: object, **kwargs: object) -> CheckpointStore:
        opened.append(Path(path))
        return original(cls, path, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(CheckpointStore, "open_read_only", classmethod(spy))
    own = runs / "bulk" / "shards" / "part-2-of-4" / "checkpoint.sqlite"

    plan_partition(manifest, runs, 2, 4)
    assert set(opened) <= {own}, opened

    assert run("merge", "bulk", "--runs-dir", str(runs))[0] == 0
    opened.clear()
    plan_partition(manifest, runs, 2, 4)
    assert runs / "bulk" / "checkpoint.sqlite" in opened
    assert set(opened) <= {own, runs / "bulk" / "checkpoint.sqlite"}, opened


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
