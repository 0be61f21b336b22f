"""Executions are visible (DESIGN.md invariant 10): each run of a manifest whose CSV grows is an
execution with its own id, figures and rows, in the store, the results, the ledger and `status`.

Runs in this process without Prefect (no server configured): the CLI's own mode.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from relaybatch.engine import CheckpointStore

if TYPE_CHECKING:
    from tests.conftest import Cli


def write_csv(path: Path, rows: int) -> Path:
    lines = ["id,model,prompt,max_tokens"]
    lines += [f"p{n},relay-chat-small,Summarise paragraph {n}.,16" for n in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_execution_has_its_figures_rows_and_ledger_rows(tmp_path: Path, cli: Cli) -> None:
    run = cli
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "nightly.csv", 3)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    write_csv(manifest, 5)  # the CSV grew: two new rows
    code, second = run("run", str(manifest), "--runs-dir", runs)
    assert code == 0 and "2 requests sent by this execution (execution 2 of the run)" in second
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0  # nothing new

    folder = tmp_path / "runs" / "nightly"
    with CheckpointStore.open_read_only(folder / "checkpoint.sqlite") as store:
        executions = store.executions()
    assert [(e["id"], e["entry"], e["added"], e["sent"]) for e in reversed(executions)] == [
        (1, "cli", 3, 3),
        (2, "cli", 2, 2),
        (3, "cli", 0, 0),
    ]
    assert all(e["ended_at"] and not e["stop_reason"] for e in executions)

    results = pq.read_table(folder / "results" / "nightly.parquet").to_pylist()
    assert sorted((row["item_id"], row["execution"]) for row in results) == [
        ("p0", 1),
        ("p1", 1),
        ("p2", 1),
        ("p3", 2),
        ("p4", 2),
    ]
    ledger = pq.read_table(folder / "ledger.parquet").to_pylist()
    by_execution: dict[int, Decimal] = {}
    for row in ledger:
        by_execution[row["execution"]] = by_execution.get(row["execution"], Decimal(0)) + row["usd"]
    assert sorted(by_execution) == [1, 2] and len(ledger) == 5

    code, status = run("status", "nightly", "--runs-dir", runs)
    assert code == 0
    assert "last execution: execution 3 (cli): new 0, sent 0, done 0, failed 0, spent 0" in status
    code, status = run("status", "nightly", "--runs-dir", runs, "--execution", "2")
    assert code == 0
    line = next(line for line in status.splitlines() if line.startswith("execution: execution 2"))
    assert line.startswith("execution: execution 2 (cli): new 2, sent 2, done 2, failed 0, spent ")
    assert Decimal(line.split("spent ")[1].split(" USD")[0]) == by_execution[2] > 0

    code, output = run("status", "nightly", "--runs-dir", runs, "--execution", "9")
    assert code == 1 and "no execution 9 in this run (newest: 3, 2, 1)" in output
    assert "Traceback" not in output

    code, report = run("report", "nightly", "--runs-dir", runs, "--dashboards-dir", str(tmp_path / "d"))
    assert code == 0 and "nightly: last execution: execution 3 (cli): new 0" in report


def test_one_nights_new_rows_are_one_filter_away(tmp_path: Path, cli: Cli) -> None:
    run = cli
    """The documented one-liner (docs/costs.md, "One night's rows") reads the second night's rows."""
    runs = str(tmp_path / "runs")
    manifest = write_csv(tmp_path / "nightly.csv", 2)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    write_csv(manifest, 3)
    assert run("run", str(manifest), "--runs-dir", runs)[0] == 0
    results = tmp_path / "runs" / "nightly" / "results" / "nightly.parquet"

    night = pq.read_table(results, filters=[("execution", "=", 2)])

    assert night.column("item_id").to_pylist() == ["p2"]
