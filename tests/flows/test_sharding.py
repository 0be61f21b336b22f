"""Scale-out: a manifest split into 2 shard flow runs, merged into one result set."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.connect import embedded_emulator
from relaybatch.errors import UserError
from relaybatch.manifests import load_items
from relaybatch.run import RunPaths, Shard, merge_shard_results, shard_count_on_disk


def write_manifest(folder: Path, rows: int) -> Path:
    path = folder / "bulk.csv"
    lines = ["id,model,prompt,max_tokens"]
    lines += [f"p{n},relay-chat-small,Summarise paragraph {n}.,16" for n in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_shards_partition_the_items(tmp_path: Path) -> None:
    keys = [item.key for item in load_items(write_manifest(tmp_path, 40))]
    owners = [[index for index in (1, 2, 3) if Shard(index, 3).contains(key)] for key in keys]
    assert all(len(owner) == 1 for owner in owners)  # every item in exactly one shard
    assert {owner[0] for owner in owners} == {1, 2, 3}


@pytest.mark.parametrize("text", ["0/2", "3/2", "two", "1/0"])
def test_bad_shard_text_is_a_user_error(text: str) -> None:
    with pytest.raises(UserError, match="shard"):
        Shard.parse(text)


def test_merge_names_the_missing_shard(tmp_path: Path) -> None:
    run = RunPaths(tmp_path / "bulk")
    (Shard(1, 2).paths(run).root).mkdir(parents=True)
    Shard(1, 2).paths(run).checkpoint.touch()
    with pytest.raises(UserError, match="2-of-2"):
        merge_shard_results(run, 2)
    assert shard_count_on_disk(run) == 2


@pytest.mark.usefixtures("prefect_harness")
async def test_two_shards_run_as_flow_runs_and_merge_into_one_result_set(tmp_path: Path) -> None:
    from relaybatch.flows import run_sharded

    manifest = write_manifest(tmp_path, 24)
    emulator = embedded_emulator().state.emulator
    before = emulator.request_count("POST", "/v1/chat/completions")

    outcome = await run_sharded(manifest, 2, runs_dir=tmp_path / "runs")

    # each item sent once, by exactly one shard
    assert emulator.request_count("POST", "/v1/chat/completions") == before + 24
    shard_rows = [
        pq.read_table(
            tmp_path / "runs" / "bulk" / "shards" / f"{n}-of-2" / "results" / "bulk.parquet"
        ).num_rows
        for n in (1, 2)
    ]
    assert sum(shard_rows) == 24 and all(rows > 0 for rows in shard_rows)
    merged = pq.read_table(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet")
    assert sorted(merged.column("item_id").to_pylist()) == sorted(f"p{n}" for n in range(24))
    assert outcome.counts == {"done": 24}
    assert outcome.added == 24


@pytest.mark.usefixtures("prefect_harness")
def test_one_shard_per_command_then_merge(tmp_path: Path) -> None:
    """What two machines do: each runs its shard into the shared runs folder; one merges."""
    manifest = write_manifest(tmp_path, 10)
    runs = str(tmp_path / "runs")
    runner = CliRunner()

    for shard in ("1/2", "2/2"):
        result = runner.invoke(app, ["run", str(manifest), "--runs-dir", runs, "--shard", shard])
        assert result.exit_code == 0, result.output
    merged = runner.invoke(app, ["merge", "bulk", "--runs-dir", runs])

    assert merged.exit_code == 0, merged.output
    assert pq.read_table(tmp_path / "runs" / "bulk" / "results" / "bulk.parquet").num_rows == 10


@pytest.mark.slow
def test_an_unsharded_run_after_its_shards_failed_items_is_a_no_op_the_second_time(tmp_path: Path) -> None:
    """Shard a run, let a shard fail some items for good (a 400 answer: no retry), then run it
    unsharded twice, each a real `relaybatch run`. The first folds the shards in (their failures
    too); the second has nothing new to fold, so its plan is skipped and nothing is sent. Before,
    every fold took the failed rows again and every unsharded run planned the whole manifest."""
    import sqlite3

    import yaml

    from tests.conftest import REPO_ROOT
    from tests.run.test_execution_lock import _command, _write_manifest
    from tests.run.test_graceful_cancel import _slow_emulator

    config = yaml.safe_load((REPO_ROOT / "configs" / "emulator.yaml").read_text())
    config["faults"] = {"seed": 0, "rules": [{"fault": "status=400", "rate": 0.5, "paths": ["/v1/chat"]}]}
    failing = tmp_path / "failing.yaml"
    failing.write_text(yaml.safe_dump(config))
    fine = _slow_emulator(tmp_path, 0)
    runs, manifest = str(tmp_path / "runs"), str(_write_manifest(tmp_path / "many.csv", 20))

    shard = _command("run", manifest, "--runs-dir", runs, "--shard", "1/2", emulator=failing)
    assert shard.returncode == 1 and "failed" in shard.stderr, shard.stderr
    assert _command("run", manifest, "--runs-dir", runs, "--shard", "2/2", emulator=fine).returncode == 0
    first = _command("run", manifest, "--runs-dir", runs, emulator=fine)
    assert "0 requests sent" in first.stdout and "failed" in first.stdout, first.stdout

    second = _command("run", manifest, "--runs-dir", runs, emulator=fine)

    assert "no input changed since the last plan" in second.stderr, second.stderr

    def items(stdout: str) -> list[str]:  # the same figures; each execution names its own number
        return [
            re.sub(r"\(execution \d+ of the run\)", "", line)
            for line in stdout.splitlines()
            if line.startswith("items: ")
        ]

    assert items(second.stdout) == items(first.stdout)
    assert "(execution 2 of the run)" in second.stdout and "(execution 1 of the run)" in first.stdout
    assert "0 requests sent" in items(second.stdout)[0]
    checkpoint = sqlite3.connect(tmp_path / "runs" / "many" / "checkpoint.sqlite")
    try:
        folds = checkpoint.execute("select detail from events where state = 'absorbed'").fetchall()
    finally:
        checkpoint.close()
    assert len(folds) == 2  # each shard's store, once: by the first unsharded run
