"""The Python API (relaybatch.Run, relaybatch.Job): a DataFrame in, DataFrames joined to its rows out,
over the CLI's run layer: same folder, keys and exactly-once."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import relaybatch
from relaybatch.cli import app
from relaybatch.engine import CheckpointStore

JOB = relaybatch.Job(kind="chat", model="relay-chat-small", prompt="Say {text}", request={"max_tokens": 16})


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"text": ["good film", "bad film", "fine"], "stars": [5, 1, 3]}, index=[10, 11, 12])


def test_a_dataframe_runs_and_comes_back_joined_to_its_rows(tmp_path: Path) -> None:
    run = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path)

    outcome = run.run(progress=False)

    assert outcome.counts == {"done": 3} and outcome.sent == 3
    results = run.results()
    assert list(results.index) == [10, 11, 12]  # the DataFrame's own index
    assert list(results["text"]) == ["good film", "bad film", "fine"]
    assert list(results["state"]) == ["done"] * 3
    assert results["output_text"].str.startswith("Emulated answer").all()
    assert "input_tokens" in results.columns and "input__row" not in results.columns
    ledger = run.ledger()
    assert list(ledger["stars"]) == [5, 1, 3] and set(ledger["outcome"]) == {"charged"}
    assert all(isinstance(usd, Decimal) for usd in ledger["usd"])
    assert run.status().to_dict("records") == [{"job": "chat", "done": 3, "total": 3}]


def test_running_again_sends_nothing_and_the_cli_sees_the_same_run(tmp_path: Path) -> None:
    run = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path)
    run.run(progress=False)

    again = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path).run(progress=False)
    assert again.sent == 0 and again.counts == {"done": 3}

    manifest = tmp_path / "films" / "input" / "manifest.yaml"
    resumed = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(tmp_path)])
    assert resumed.exit_code == 0, resumed.output
    assert "0 requests sent by this execution" in resumed.output
    # Opened again from its manifest, a table's run still joins its answers to the rows.
    assert list(relaybatch.Run(manifest, runs_dir=tmp_path).results()["stars"]) == [5, 1, 3]


def test_an_edited_row_is_the_only_one_sent_again(tmp_path: Path) -> None:
    relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path).run(progress=False)
    edited = _frame()
    edited.loc[11, "text"] = "awful film"
    outcome = relaybatch.Run.from_table(edited, JOB, name="films", runs_dir=tmp_path).run(progress=False)
    assert outcome.sent == 1 and outcome.counts == {"done": 3, "superseded": 1}


def test_an_arrow_table_and_a_manifest_run_too(tmp_path: Path) -> None:
    table = pa.table({"text": ["one", "two"]})
    run = relaybatch.Run.from_table(table, JOB, name="arrow", runs_dir=tmp_path)
    assert run.run(progress=False).counts == {"done": 2}
    assert list(run.results()["text"]) == ["one", "two"]

    manifest = tmp_path / "m.csv"
    manifest.write_text("id,model,prompt\nq1,relay-chat-small,hi\n")
    by_file = relaybatch.Run(manifest, runs_dir=tmp_path)
    assert by_file.run(progress=False).counts == {"done": 1}
    assert list(by_file.results()["item_id"]) == ["q1"]


def test_the_plan_prices_each_job_without_sending(tmp_path: Path) -> None:
    plan = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path).plan()
    assert plan[["job", "kind", "model", "items"]].to_dict("records") == [
        {"job": "chat", "kind": "chat", "model": "relay-chat-small", "items": 3}
    ]
    assert plan.loc[0, "worst_usd"] >= plan.loc[0, "expected_usd"] > 0
    assert not (tmp_path / "films" / "checkpoint.sqlite").exists()


async def test_it_runs_inside_a_running_event_loop(tmp_path: Path) -> None:
    # As in a notebook cell: asyncio.run is refused here, so the engine runs in a worker thread.
    asyncio.get_running_loop()
    run = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path)
    assert run.run(progress=False).counts == {"done": 3}
    assert len(run.results()) == 3
    assert (await run.run_async(progress=False)).sent == 0


def test_failed_rows_are_retried_from_the_api(tmp_path: Path) -> None:
    run = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path)
    run.run(progress=False)
    with CheckpointStore(run.paths.checkpoint) as store:  # as if the gateway had refused one
        key = store.keys_in_state("done")[0]
        store.transition(key, "superseded")
        store.transition(key, "pending")
        store.transition(key, "sending")
        store.transition(key, "failed", last_error="PermissionDenied: no access (403)")
    assert run.run(progress=False).counts == {"done": 2, "failed": 1}
    outcome = run.run(retry_failed=["403"], progress=False)
    assert outcome.counts == {"done": 3} and outcome.sent == 1


def test_a_column_named_like_the_row_number_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'_row'"):
        relaybatch.Run.from_table(pd.DataFrame({"_row": [1]}), JOB, name="x", runs_dir=tmp_path)


def test_results_while_the_run_executes_are_a_consistent_snapshot(tmp_path: Path) -> None:
    from relaybatch.run.locking import executing

    run = relaybatch.Run.from_table(_frame(), JOB, name="films", runs_dir=tmp_path)
    run.run(progress=False)
    (tmp_path / "films" / "results" / "chat.parquet").unlink()
    with executing(run.paths):  # as while run() executes in a worker thread of this process
        during = run.results()
    assert len(during) == 3 and list(during["stars"]) == [5, 1, 3]
    assert (tmp_path / "films" / "snapshot" / "results" / "chat.parquet").exists()
    assert not (tmp_path / "films" / "results" / "chat.parquet").exists()  # left to the execution
