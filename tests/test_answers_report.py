"""`relaybatch report RUN --answers`: the label summary of a run's results."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.costs.dashboard import render_dashboard
from relaybatch.costs.dashboard_data import load_dashboard
from relaybatch.structured.summary import summarize_results

ENUM = pa.dictionary(pa.int32(), pa.string())


def results(folder: Path) -> Path:
    table = pa.table(
        {
            "item_id": ["a", "b", "c", "d"],
            "answer_sentiment": pa.array(["positive", "negative", "positive", None], ENUM),
            "answer_confidence": [0.9, 0.3, 0.8, None],
            "answer_sarcastic": [True, False, False, None],
            "answer_tags": [["x"], [], None, None],
            "answer_json": ["{}", "{}", "{}", "oops"],
        }
    )
    path = folder / "runs" / "labels" / "results" / "labels.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    return path


def test_each_answer_column_is_counted_or_averaged(tmp_path: Path) -> None:
    summaries = {summary.column: summary for summary in summarize_results([results(tmp_path)], 0.5)}

    assert set(summaries) == {"answer_sentiment", "answer_confidence", "answer_sarcastic"}
    assert summaries["answer_sentiment"].distribution() == [("positive", 2, 2 / 3), ("negative", 1, 1 / 3)]
    assert summaries["answer_sentiment"].rows == 4
    assert summaries["answer_sarcastic"].counts == {"true": 1, "false": 2}
    confidence = summaries["answer_confidence"]
    assert round(confidence.mean or 0, 3) == round((0.9 + 0.3 + 0.8) / 3, 3)
    assert confidence.share_below == 1 / 3
    assert confidence.distribution() == []  # a number is averaged, not counted


def test_the_command_prints_the_summary(tmp_path: Path) -> None:
    results(tmp_path)

    outcome = CliRunner().invoke(
        app, ["report", "labels", "--answers", "--threshold", "0.85", "--runs-dir", str(tmp_path / "runs")]
    )

    assert outcome.exit_code == 0, outcome.output
    assert "positive 66.7% (2)" in outcome.output
    assert "66.7% (2)" in outcome.output  # two confidences below 0.85


def test_a_run_without_results_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "runs" / "labels").mkdir(parents=True)
    (tmp_path / "runs" / "labels" / "checkpoint.sqlite").touch()

    outcome = CliRunner().invoke(app, ["report", "labels", "--answers", "--runs-dir", str(tmp_path / "runs")])

    assert outcome.exit_code == 1
    assert "relaybatch export labels" in outcome.output


def test_the_dashboard_shows_the_same_summary(tmp_path: Path) -> None:
    results(tmp_path)

    data = load_dashboard(tmp_path / "runs", ["labels"])
    page = render_dashboard(data, "labels")

    assert '<tr data-answer="labels:answer_sentiment">' in page
    assert "positive 66.7% (2)" in page
