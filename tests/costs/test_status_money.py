"""`relaybatch status RUN` shows the run's money from its cost stores opened read-only: spent
(known), unknown outcomes, calls reserved in flight, each job's spend beside its budget, the run's
budget once and what is left of it; for the run's own store and its shard folders."""

from __future__ import annotations

import dataclasses
import re
import shutil
import time
from decimal import Decimal
from pathlib import Path

import pytest
from cost_builders import sample_rows, unknown_video_row
from test_cost_store_read_only import store_files
from test_costs_store_layout import layout0_store, raw, reservation
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.cost_model import Budgets
from relaybatch.costs import CostStore, budget_settings
from relaybatch.costs.ledger import LedgerRow, write_ledger
from relaybatch.engine import CheckpointStore
from relaybatch.manifests import Item
from relaybatch.run import RunPaths, executing
from relaybatch.run.handoff import leave_handoff
from tests.run.test_execution_lock import CHAT, SlowRun, _command, _write_manifest
from tests.run.test_graceful_cancel import _counts, _slow_emulator


def make_run(run_dir: Path, budgets: Budgets | None = None, shards: int = 1) -> None:
    """A run folder with two items and its budgets, as `relaybatch run` stores them (no costs yet)."""
    store = CheckpointStore(run_dir / "checkpoint.sqlite")
    try:
        items = [
            Item.build(item_id=f"q{n}", job="summaries", kind="chat", request={"n": n}, carry={})
            for n in (1, 2)
        ]
        store.add_items(items)
        store.save_run(run_dir.name, budget_settings(budgets or Budgets(), shards))
    finally:
        store.close()


def record(folder: Path, rows: list[LedgerRow]) -> None:
    store = CostStore(folder / "costs.sqlite")
    try:
        store.record_many(rows)
    finally:
        store.close()


def status(runs: Path, run: str = "demo") -> str:
    result = CliRunner().invoke(app, ["status", run, "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def money_line(output: str) -> str:
    """The one line of figures (never wrapped off a terminal)."""
    [line] = [line for line in output.splitlines() if line.startswith("money: ")]
    return line


def table_row(output: str, first: str) -> list[str]:
    """The cells of the money table's row that starts with ``first``."""
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip("│┃ ").split("│")]
        if cells[0] == first and len(cells) == 6:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{output}")


# sample_rows' priced charges: four summaries of 0.006 USD, four covers of 0.08, four labels of
# 0.00021 (judgment) and four of 0.05 (search); four more summaries of an unpriced model, known at 0.
KNOWN = 4 * Decimal("0.006") + 4 * Decimal("0.08") + 4 * (Decimal("0.00021") + Decimal("0.05"))


def test_status_shows_spent_unknown_outcomes_in_flight_and_every_budget(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    make_run(run_dir, Budgets(run_usd=Decimal("2"), job_usd={"videos": Decimal("1"), "idle": Decimal("3")}))
    rows = sample_rows()
    unpriced = [row for row in rows if row.usd is None]
    assert sum((row.cost.known_usd for row in rows), Decimal(0)) == KNOWN and len(unpriced) == 4
    rows = [row for row in rows if row.usd is not None]  # unknown prices: the next test
    in_flight = dataclasses.replace(reservation(sample_rows()[0], "attempt-2"), reserved_usd=Decimal("0.25"))
    record(run_dir, [*rows, unknown_video_row("videos", "v1", "key-v1"), in_flight])

    with executing(RunPaths(run_dir)):  # an execution holds the run: its reservation is in flight
        output = status(tmp_path)
    assert money_line(output) == (
        "money: spent (known) $0.544840; "
        "unknown outcomes $0.400000 (worst case) for 1 call(s) sent with no answer recorded; "
        "reserved (in flight) $0.250000 for 1 call(s); total $1.194840; "
        "run budget $2.000000, $0.805160 remaining"
    )
    assert table_row(output, "summaries") == ["summaries", "$0.024000", "$0.250000", "$0.274000", "-", "-"]
    assert table_row(output, "videos") == [
        "videos",
        "$0.000000",
        "$0.400000",
        "$0.400000",
        "$1.000000",
        "$0.600000",
    ]
    assert table_row(output, "idle") == [
        "idle",
        "$0.000000",
        "$0.000000",
        "$0.000000",
        "$3.000000",
        "$3.000000",
    ]
    assert table_row(output, "run") == [
        "run",
        "$0.544840",
        "$0.650000",
        "$1.194840",
        "$2.000000",
        "$0.805160",
    ]

    # Nobody executing: the reservation was left by an execution that ended without its answer.
    line = money_line(status(tmp_path))
    assert "reserved by an execution that ended without their answer $0.250000 for 1 call(s)" in line
    assert "(unknown outcomes once the run resumes)" in line


def test_a_call_of_unknown_price_is_named_apart(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    make_run(run_dir)
    unpriced = [row for row in sample_rows() if row.usd is None]
    record(run_dir, [dataclasses.replace(row, reserved_usd=Decimal("0.05")) for row in unpriced])

    line = money_line(status(tmp_path))
    assert "unknown prices $0.200000 (worst case) for 4 call(s) charged at a price not known" in line
    assert line.endswith("total $0.200000; no run budget")


def test_a_run_with_no_cost_store_has_spent_nothing_yet(tmp_path: Path) -> None:
    make_run(tmp_path / "demo")
    assert money_line(status(tmp_path)) == "money: nothing spent yet; no budget"
    assert not (tmp_path / "demo" / "costs.sqlite").exists()

    make_run(tmp_path / "budgeted", Budgets(run_usd=Decimal("5")))
    line = money_line(status(tmp_path, "budgeted"))
    assert line.startswith("money: spent (known) $0.000000; ")
    assert line.endswith("total $0.000000; run budget $5.000000, $5.000000 remaining")
    assert not (tmp_path / "budgeted" / "costs.sqlite").exists()


def test_an_old_layout_store_is_shown_as_it_is_and_left_unmigrated(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    make_run(run_dir)
    path = layout0_store(run_dir)
    before = store_files(run_dir)

    line = money_line(status(tmp_path))
    # Two chat charges, a reservation left open and a video create of unknown outcome (0.40).
    assert line == (
        "money: spent (known) $0.000043; "
        "unknown outcomes $0.400000 (worst case) for 1 call(s) sent with no answer recorded; "
        "reserved by an execution that ended without their answer $0.000094 for 1 call(s) "
        "(unknown outcomes once the run resumes); total $0.400137; no run budget"
    )
    assert store_files(run_dir) == before
    assert raw(path, "pragma user_version") == [(0,)]


def test_a_sharded_runs_money_adds_its_shard_folders_and_shows_the_budget_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    make_run(run_dir, Budgets(run_usd=Decimal("10")))
    rows = [row for row in sample_rows() if row.usd is not None]
    for index, part in enumerate(("1-of-2", "2-of-2")):
        shard = run_dir / "shards" / part
        make_run(shard, Budgets(run_usd=Decimal("10")), shards=2)  # each enforces 5: the run's is 10
        record(shard, rows[index::2])
        store = CostStore(shard / "costs.sqlite")  # its owner's execution ends: its files
        try:
            write_ledger(store, shard / "ledger.parquet")
        finally:
            store.close()
        leave_handoff(RunPaths(shard))

    output = status(tmp_path)
    assert "money (the run's cost store and 2 shard folder(s))" in output
    assert money_line(output).endswith("total $0.544840; run budget $10.000000, $9.455160 remaining")


def test_a_store_that_cannot_be_read_is_named_and_the_rest_still_shows(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    make_run(run_dir)
    shutil.copy(Path(__file__), run_dir / "costs.sqlite")  # not a database
    output = status(tmp_path)
    assert "summaries" in output  # the items still show
    assert money_line(output).startswith(f"money: cannot read the cost store of {run_dir}: ")


# -- beside a real execution ---------------------------------------------------------------------

MONEY = r"\$([0-9,]+\.[0-9]{6})"


def figures(line: str) -> dict[str, Decimal]:
    """The amounts of a money line by name, and the calls in flight."""
    found = {
        name: re.search(f"{label} {MONEY}", line)
        for name, label in (
            ("known", r"spent \(known\)"),
            ("unknown", "unknown outcomes"),
            ("in_flight", r"reserved \(in flight\)"),
            ("total", "total"),
            ("budget", "run budget"),
        )
    }
    assert all(found.values()), line
    amounts = {name: Decimal(match[1].replace(",", "")) for name, match in found.items() if match}
    calls = re.search(rf"reserved \(in flight\) {MONEY} for (\d+) call", line)
    assert calls is not None, line
    return amounts | {"calls": Decimal(calls[2])}


@pytest.mark.slow
def test_status_follows_a_run_executing_in_another_process_without_slowing_it(tmp_path: Path) -> None:
    slow = _slow_emulator(tmp_path, 2.0, CHAT)  # calls in flight; the catalog quick
    runs, manifest = tmp_path / "runs", _write_manifest(tmp_path / "many.csv", 400)
    checkpoint = runs / "many" / "checkpoint.sqlite"
    run = SlowRun(manifest, runs, slow, "--budget", "5.00")
    try:
        run.wait_until_sending(checkpoint)
        shown = _command("status", "many", "--runs-dir", str(runs), emulator=slow)
        assert shown.returncode == 0, shown.stderr
        assert f"executing now: executing run 'many': pid {run.process.pid}" in shown.stdout
        amounts = figures(money_line(shown.stdout))
        assert amounts["calls"] > 0 and amounts["in_flight"] > 0  # reserved before each send
        # Each figure is shown rounded to the micro-dollar, so the shown parts may sum to a micro-dollar
        # or two off the shown total (0.147643 shown for 0.000018 + 0 + 0.147626).
        parts = amounts["known"] + amounts["unknown"] + amounts["in_flight"]
        assert abs(amounts["total"] - parts) <= Decimal("0.000002"), amounts
        assert amounts["budget"] == Decimal("5.00")
        assert money_line(shown.stdout).endswith(f"${Decimal('5') - amounts['total']:,.6f} remaining")

        # The execution went on writing meanwhile: more items end done after the status than before.
        done = _counts(checkpoint).get("done", 0)
        deadline = time.monotonic() + 120
        while _counts(checkpoint).get("done", 0) <= done:
            assert time.monotonic() < deadline and run.process.poll() is None, run.process.communicate()
            time.sleep(0.2)
    finally:
        run.kill()

    line = money_line(_command("status", "many", "--runs-dir", str(runs), emulator=slow).stdout)
    assert "reserved by an execution that ended without their answer" in line  # killed mid-flight


def test_status_projects_the_total_and_warns_when_the_budget_will_not_cover_it() -> None:
    from relaybatch.cost_model import Budgets as RunBudgets
    from relaybatch.costs.report import RunSpend
    from relaybatch.run.status import money_line as status_money_line
    from relaybatch.run.views import RunMoney

    spend = RunSpend(["demo"])
    for _ in range(10):  # ten items ended at 0.05 USD each
        spend.add(
            {
                "job": "a",
                "usd": "0.05",
                "known_usd": "0.05",
                "reserved_usd": None,
                "priced": 1,
                "outcome": "charged",
            }
        )
    money = RunMoney(spend, RunBudgets(run_usd=Decimal("2")), 0)

    covered = status_money_line(money, False, (10, 20))
    short = status_money_line(money, False, (10, 90))

    assert "projected $1.500000 for the 20 item(s) still open at the mean so far" in covered
    assert "WARNING" not in covered
    assert "projected $5.000000 for the 90 item(s) still open" in short
    assert (
        "WARNING: at the cost of the answers so far the run will need about $5.0000, more than its $2 budget"
        in short
    )
    assert short.endswith("run budget $2.000000, $1.500000 remaining")
