"""Handoff files (relaybatch/run/handoff.py): what a store's owner leaves for the run's other
stores, trusted only while the store is as its owner left it."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.engine import CheckpointStore
from relaybatch.run import RunBusy, RunPaths
from relaybatch.run.handoff import current_handoff, fresh_handoff, recorded_manifest

pytestmark = pytest.mark.usefixtures("prefect_harness")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), terminal_width=400)
    return result.exit_code, result.output


def write_csv(path: Path, ids: range) -> Path:
    lines = ["id,model,prompt,max_tokens"] + [f"p{n},relay-chat-small,Say {n}.,16" for n in ids]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def held_elsewhere(folder: Path) -> Iterator[None]:
    """The folder's lock held through another open file, as another process (or host) holds it."""
    descriptor = os.open(folder / "execution.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(descriptor)


def test_an_execution_leaves_its_settled_rows_and_its_manifest_beside_its_store(tmp_path: Path) -> None:
    manifest = write_csv(tmp_path / "bulk.csv", range(12))
    assert run("run", str(manifest), "--runs-dir", str(tmp_path / "runs"))[0] == 0
    paths = RunPaths(tmp_path / "runs" / "bulk")

    handoff = current_handoff(paths)

    assert handoff is not None
    assert handoff.counts == {"done": 12} and handoff.rows == 12
    assert handoff.manifest is not None and handoff.manifest[0] == str(manifest.resolve())
    table = pq.read_table(paths.handoff)
    assert sorted(table.column("item_id").to_pylist()) == sorted(f"p{n}" for n in range(12))
    assert set(table.column("state").to_pylist()) == {"done"}
    assert None not in table.column("result").to_pylist()


def test_a_store_written_since_its_handoff_is_not_trusted_and_its_next_reader_writes_it_again(
    tmp_path: Path,
) -> None:
    manifest = write_csv(tmp_path / "bulk.csv", range(5))
    assert run("run", str(manifest), "--runs-dir", str(tmp_path / "runs"))[0] == 0
    paths = RunPaths(tmp_path / "runs" / "bulk")
    before = json.loads(paths.handoff_record.read_text())
    with CheckpointStore(paths.checkpoint) as store:  # as an execution killed before it let go
        store.record_manifest("/elsewhere/bulk.csv", "another identity")

    assert current_handoff(paths) is None
    with held_elsewhere(paths.root), pytest.raises(RunBusy, match=r"handoff\.parquet"):
        fresh_handoff(paths)  # its owner is still at work (or another host holds it): refused
    assert recorded_manifest(paths) == (str(manifest.resolve()), before["manifest"][1])  # the last one

    handoff = fresh_handoff(paths)  # nobody holds it: this process owns the store for a moment

    assert handoff.manifest == ("/elsewhere/bulk.csv", "another identity")
    assert current_handoff(paths) == handoff


def test_the_dashboard_finds_a_partitions_stuck_renders_in_its_handoff_file(tmp_path: Path) -> None:
    import pyarrow as pa

    from relaybatch.costs.dashboard_data import stuck_in_handoff
    from relaybatch.engine.store import HANDOFF_COLUMNS
    from relaybatch.run.handoff import _schema

    rows = [
        {"key": "k1", "item_id": "v1", "job": "clips", "state": "polling", "submitted_at": 1_000,
         "result": json.dumps({"remote": {"status": "in_progress"}}), "last_error": "stuck: 900 s past"},
        {"key": "k2", "item_id": "v2", "job": "clips", "state": "polling", "submitted_at": 1_000,
         "result": None, "last_error": None},
        {"key": "k3", "item_id": "v3", "job": "clips", "state": "done", "submitted_at": 1_000,
         "result": None, "last_error": "stuck: before it finished"},
    ]  # fmt: skip
    table = pa.Table.from_pylist([dict.fromkeys(HANDOFF_COLUMNS) | row for row in rows], schema=_schema())
    pq.write_table(table, tmp_path / "handoff.parquet")

    stuck = stuck_in_handoff(tmp_path / "handoff.parquet", "big")

    assert [(one.item, one.last_status, one.reason) for one in stuck] == [
        ("v1", "in_progress", "stuck: 900 s past")
    ]
