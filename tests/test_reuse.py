"""Reuse across runs (``run.reuse``): done answers of other runs to the same requests are taken
instead of sent, at 0 USD in the ledger with a reference to the original charge; never failures
or uncertain items."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import relaybatch
from relaybatch.cli import app
from relaybatch.engine import CheckpointStore
from relaybatch.manifests import ManifestInvalid, open_manifest

ROWS = "".join(f"q{n},Say {n}\n" for n in range(4))


def _manifest(folder: Path, name: str, reuse: str) -> Path:
    (folder / "questions.csv").write_text("id,question\n" + ROWS)
    path = folder / f"{name}.yaml"
    path.write_text(
        f"run: {{name: {name}{', reuse: ' + reuse if reuse else ''}}}\n"
        "jobs:\n"
        "  - {name: answers, kind: chat, model: relay-chat-small, prompt: '{question}', "
        "request: {max_tokens: 16}, data: questions.csv, carry: [id]}\n"
    )
    return path


def _run(manifest: Path, runs: Path) -> str:
    result = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_second_run_reusing_the_first_sends_nothing_and_bills_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = _run(_manifest(tmp_path, "first", ""), runs)
    assert "4 requests sent" in first

    second = _run(_manifest(tmp_path, "second", "[first]"), runs)

    assert "reuse: 4 done answers taken instead of sending (4 from run 'first'), 0 USD each" in second
    assert "items: done 4 (4 new); 0 requests sent by this execution" in second
    results = pq.read_table(runs / "second" / "results" / "answers.parquet").to_pylist()
    assert [row["reused_from"] for row in results] == [f"first:q{n}" for n in range(4)]
    originals = pq.read_table(runs / "first" / "results" / "answers.parquet").to_pylist()
    assert [row["output_text"] for row in results] == [row["output_text"] for row in originals]
    assert all(row["cost_usd"] == Decimal(0) for row in results)
    ledger = pq.read_table(runs / "second" / "ledger.parquet").to_pylist()
    first_ledger = pq.read_table(runs / "first" / "ledger.parquet").to_pylist()
    charges = {f"{row['item_key']}:{row['call']}" for row in first_ledger}
    assert [row["outcome"] for row in ledger] == ["reused"] * 4
    assert sum(row["usd"] for row in ledger) == Decimal(0)
    for row in ledger:  # each names the original charge: <key>:<call> in run 'first'
        source, _, call = row["call"].removeprefix("reused:").partition(":")
        assert source == "first" and f"{row['item_key']}:{call}" in charges


def test_reuse_all_and_only_done_answers(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _run(_manifest(tmp_path, "first", ""), runs)
    with CheckpointStore(runs / "first" / "checkpoint.sqlite") as store:  # one failed, one uncertain
        failed, uncertain = store.keys_in_state("done")[:2]
        for key, state in ((failed, "failed"), (uncertain, "uncertain")):
            store.transition(key, "superseded")
            store.transition(key, "pending")
            store.transition(key, "sending")
            store.transition(key, state, last_error="refused")

    second = _run(_manifest(tmp_path, "second", "all"), runs)

    assert "reuse: 2 done answers taken instead of sending (2 from run 'first')" in second
    assert "2 requests sent by this execution" in second


def test_a_named_run_that_does_not_exist_is_said(tmp_path: Path) -> None:
    output = _run(_manifest(tmp_path, "second", "[nowhere]"), tmp_path / "runs")
    assert "reuse: no run named 'nowhere' under the runs folder" in output
    assert "4 requests sent" in output


def test_reuse_is_all_or_run_names(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "second", "everything")
    with pytest.raises(ManifestInvalid, match="reuse"):
        open_manifest(manifest).validate().raise_if_invalid()


def test_the_api_reuses_across_tables(tmp_path: Path) -> None:
    import pandas as pd

    job = relaybatch.Job(kind="chat", model="relay-chat-small", prompt="{text}")
    frame = pd.DataFrame({"text": ["a", "b", "c"]})
    relaybatch.Run.from_table(frame, job, name="monday", runs_dir=tmp_path).run(progress=False)
    tuesday = relaybatch.Run.from_table(frame, job, name="tuesday", runs_dir=tmp_path, reuse="all")
    outcome = tuesday.run(progress=False)
    assert outcome.sent == 0 and outcome.counts == {"done": 3}
    assert list(tuesday.results()["reused_from"]) == ["monday:chat-1", "monday:chat-2", "monday:chat-3"]
    assert tuesday.ledger()["usd"].sum() == 0


def test_reuse_reads_the_other_runs_files_never_its_stores(tmp_path: Path) -> None:
    """DESIGN.md invariant 11: the other run may be another host's; its answers come from the
    handoff and ledger files its owner wrote (its SQLite here is not even a database any more)."""
    from tests.flows.test_partitions import unreadable_stores

    runs = tmp_path / "runs"
    _run(_manifest(tmp_path, "first", ""), runs)
    unreadable_stores([runs / "first"])

    second = _run(_manifest(tmp_path, "second", "[first]"), runs)

    assert "reuse: 4 done answers taken instead of sending (4 from run 'first'), 0 USD each" in second
    ledger = pq.read_table(runs / "second" / "ledger.parquet").to_pylist()
    assert all(not row["call"].endswith(":unrecorded") for row in ledger)  # each names its charge
