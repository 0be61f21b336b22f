"""`relaybatch status RUN` and `relaybatch export RUN` on a run folder."""

from __future__ import annotations

from pathlib import Path

from engine_items import chat
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.engine import CheckpointStore


def make_run(runs_dir: Path) -> None:
    store = CheckpointStore(runs_dir / "demo" / "checkpoint.sqlite")
    store.add_items([chat(1, job="quiz"), chat(2, job="quiz"), chat(3, job="other")])
    store.transition(chat(1, job="quiz").key, "sending", attempts=1)
    store.transition(chat(1, job="quiz").key, "uncertain", last_error="interrupted between send and answer")
    store.transition(chat(3, job="other").key, "sending")
    store.transition(chat(3, job="other").key, "done", result={"output_text": "hi"})
    store.record_stop("the gateway answered 402 (insufficient balance)")
    store.close()


def test_status_prints_counts_per_job_the_stop_reason_and_uncertain_items(tmp_path: Path) -> None:
    make_run(tmp_path)

    result = CliRunner().invoke(app, ["status", "demo", "--runs-dir", str(tmp_path)], terminal_width=200)

    assert result.exit_code == 0, result.output
    assert "quiz" in result.output and "other" in result.output
    assert "402" in result.output
    assert "chat-1" in result.output and "interrupted between send and answer" in result.output


def test_export_rebuilds_one_file_per_job(tmp_path: Path) -> None:
    make_run(tmp_path)

    result = CliRunner().invoke(app, ["export", "demo", "--runs-dir", str(tmp_path)], terminal_width=200)

    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "demo" / "results").iterdir()) == [
        "other.parquet",
        "quiz.parquet",
    ]


def test_status_of_a_missing_run_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["status", "nope", "--runs-dir", str(tmp_path)])

    assert result.exit_code == 1
    assert "no run at" in result.output
