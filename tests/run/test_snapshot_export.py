"""Results while a run goes: `relaybatch export` beside an executing run writes a consistent
snapshot under <run>/snapshot/ (one SQLite read transaction per store) and leaves the run alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.engine import CheckpointStore
from relaybatch.manifests import load_items
from relaybatch.run.snapshot import export_snapshot
from relaybatch.run_folder import RunPaths

HOLD = """
import sys, time
from pathlib import Path
from relaybatch.run.locking import executing
from relaybatch.run_folder import RunPaths
with executing(RunPaths(Path(sys.argv[1]))):
    print("holding", flush=True)
    time.sleep(60)
"""


def _store_with_items(tmp_path: Path, count: int, done: int) -> tuple[RunPaths, list[str]]:
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "id,model,prompt\n" + "".join(f"q{n},relay-chat-small,hi {n}\n" for n in range(count))
    )
    paths = RunPaths(tmp_path / "runs" / "m")
    with CheckpointStore(paths.checkpoint) as store:
        store.save_run("m")
        store.add_items(load_items(manifest))
        keys = store.keys_in_state("pending")
        for key in keys[:done]:
            _answer(store, key)
    return paths, keys


def _answer(store: CheckpointStore, key: str) -> None:
    store.transition(key, "sending")
    answer = {"output_text": f"answer {key[:6]}"}
    store.transition(key, "done", result=answer)


def test_a_snapshot_holds_every_item_as_it_stood(tmp_path: Path) -> None:
    paths, _ = _store_with_items(tmp_path, count=5, done=2)

    snapshot = export_snapshot(paths)

    assert snapshot.results == [paths.root / "snapshot" / "results" / "m.parquet"]
    rows = pq.read_table(snapshot.results[0]).to_pylist()
    assert [row["state"] for row in rows] == ["done", "done", "pending", "pending", "pending"]
    assert rows[0]["output_text"].startswith("answer ")
    assert snapshot.line() == "snapshot of the executing run: 2 of 5 items done so far"
    assert not paths.results.exists()  # the execution's own files are not touched


def test_a_copy_of_the_store_holds_it_as_it_was(tmp_path: Path) -> None:
    paths, keys = _store_with_items(tmp_path, count=3, done=1)
    with CheckpointStore.open_read_only(paths.checkpoint) as live:
        live.copy_to(tmp_path / "copy.sqlite")
    with CheckpointStore(paths.checkpoint) as writer:  # the execution goes on writing
        _answer(writer, keys[1])
    with CheckpointStore.open_read_only(tmp_path / "copy.sqlite") as copy:
        assert copy.count_by_state() == {"done": 1, "pending": 2}
    with CheckpointStore.open_read_only(paths.checkpoint) as reader:
        assert reader.count_by_state() == {"done": 2, "pending": 1}


def test_export_beside_an_execution_writes_a_snapshot(tmp_path: Path) -> None:
    paths, _ = _store_with_items(tmp_path, count=4, done=3)
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(paths.root)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
            result = CliRunner().invoke(app, ["export", "m", "--runs-dir", str(paths.root.parent)])
        finally:
            holder.kill()
    assert result.exit_code == 0, result.output
    assert f"exporting a snapshot beside it to {paths.root / 'snapshot'}" in result.output
    assert "3 of 4 items done so far" in result.output
    assert pq.read_table(paths.root / "snapshot" / "results" / "m.parquet").num_rows == 4
    assert not paths.results.exists()


def test_export_of_a_run_at_rest_rebuilds_its_own_files(tmp_path: Path) -> None:
    paths, _ = _store_with_items(tmp_path, count=2, done=2)
    result = CliRunner().invoke(app, ["export", "m", "--runs-dir", str(paths.root.parent)])
    assert result.exit_code == 0, result.output
    assert "snapshot" not in result.output and (paths.results / "m.parquet").exists()
