"""`relaybatch report` beside an execution: a store folder another process holds (run/locking.py)
keeps its ledger.parquet (the execution's export writes it), its spend is read as it stands, and
the report says so; a folder nobody holds gets its ledger refreshed. The holder is a real second
process with a real flock."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
from cost_builders import fill_cost_store, sample_rows
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.costs.ledger import CostStore, write_ledger
from relaybatch.run import holder_of
from tests.run.test_execution_lock import HelperHolder


def _run_with_a_stale_ledger(runs: Path, name: str) -> Path:
    """A run folder whose ledger.parquet holds 20 charges and whose store has one more since."""
    folder = runs / name
    folder.mkdir(parents=True)
    fill_cost_store(folder, run=name)
    store = CostStore(folder / "costs.sqlite")
    try:
        write_ledger(store, folder / "ledger.parquet")
        row = sample_rows(name)[0]
        late = row.charged_at + timedelta(days=3)
        store.record(replace(row, item_id="late", item_key="late", charged_at=late))
    finally:
        store.close()
    return folder


def _report(runs: Path, dashboards: Path) -> str:
    result = CliRunner().invoke(app, ["report", "--runs-dir", str(runs), "--dashboards-dir", str(dashboards)])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_report_leaves_an_executing_store_s_ledger_to_it_and_says_so(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    busy, idle = (_run_with_a_stale_ledger(runs, name) for name in ("busy", "idle"))
    shard = _run_with_a_stale_ledger(busy / "shards", "1-of-2")
    before = (busy / "ledger.parquet").read_bytes()
    execution = HelperHolder(busy)  # holds busy's lock as an execution does; its shard is free
    try:
        output = _report(runs, tmp_path / "dashboards")
        assert (busy / "ledger.parquet").read_bytes() == before  # left to the execution
        holder = holder_of(busy)
        assert holder is not None and holder.pid == execution.process.pid  # still its, untouched
    finally:
        execution.kill()
    line = next(line for line in output.splitlines() if line.startswith(f"{busy}:"))
    assert f"executing run 'held': pid {execution.process.pid}" in line
    assert "ledger.parquet is left for that process to write" in line
    assert f"{idle}:" not in output and f"{shard}:" not in output
    # The other run's ledger was refreshed (21 charges); a shard's is its owner's to write (its
    # store may be another host's): the report counts the 20 its ledger.parquet holds.
    assert pq.read_metadata(idle / "ledger.parquet").num_rows == 21
    assert pq.read_metadata(shard / "ledger.parquet").num_rows == 20
    assert pq.read_metadata(busy / "ledger.parquet").num_rows == 20
    assert "total $1.646520" in output  # 3 x 0.54484 + 2 x 0.006 late: busy's and idle's
    assert holder_of(idle) is None and holder_of(shard) is None  # the report held them only meanwhile

    output = _report(runs, tmp_path / "dashboards")  # the execution has ended: its ledger is refreshed
    assert pq.read_metadata(busy / "ledger.parquet").num_rows == 21
    assert "left for" not in output
