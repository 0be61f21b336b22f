"""`relaybatch export` rebuilds every export of a run from its stores, also files edited in place.

A no-op run keeps a file whose footer carries the store's change mark (export_marks.py); pyarrow
keeps that footer when a table read from the file is written back, so a file a user trimmed in
place still looks current. The rebuild the user asks for trusts no mark."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.export_marks import MARK_KEY


def _trim_in_place(path: Path) -> None:
    """What a user "cleaning" an export with pyarrow does: one row left, the footer kept."""
    pq.write_table(pq.read_table(path).slice(0, 1), path)
    assert MARK_KEY in (pq.read_metadata(path).metadata or {})


def test_export_writes_again_results_and_ledger_edited_in_place(tmp_path: Path) -> None:
    manifest, runs = tmp_path / "trim.csv", tmp_path / "runs"
    manifest.write_text(
        "id,model,prompt,max_tokens\n" + "".join(f"r{n},relay-chat-small,Say {n},16\n" for n in range(3))
    )
    ran = CliRunner().invoke(app, ["run", str(manifest), "--runs-dir", str(runs)])
    assert ran.exit_code == 0, ran.output
    results, ledger = runs / "trim" / "results" / "trim.parquet", runs / "trim" / "ledger.parquet"
    charges = pq.read_table(ledger).num_rows
    assert pq.read_table(results).num_rows == 3 and charges >= 3
    _trim_in_place(results)
    _trim_in_place(ledger)

    exported = CliRunner().invoke(app, ["export", "trim", "--runs-dir", str(runs)])

    assert exported.exit_code == 0, exported.output
    assert pq.read_table(results).column("item_id").to_pylist() == ["r0", "r1", "r2"]
    assert pq.read_table(ledger).num_rows == charges
    assert f"results: {results}" in exported.output and f"cost ledger: {ledger}" in exported.output
    assert not list(results.parent.glob(".*tmp*"))  # nothing left half-written beside them
