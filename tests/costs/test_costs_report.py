"""Spend reports: exact sums by job, model, kind and day; the ledger Parquet; `relaybatch report`."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cost_builders import fill_cost_store, unknown_video_row, write_checkpoint_events
from typer.testing import CliRunner

from relaybatch.cli import app
from relaybatch.costs.dashboard import render_dashboard
from relaybatch.costs.dashboard_data import MAX_BUCKETS, DashboardData, TimeBuckets
from relaybatch.costs.ledger import MONEY, CostStore, write_ledger
from relaybatch.costs.report import MAX_TIME_POINTS, RunSpend, activity_from_events, load_spend

D = Decimal


def make_run(runs_dir: Path, name: str = "demo") -> list[Decimal]:
    run_dir = runs_dir / name
    run_dir.mkdir(parents=True)
    amounts = fill_cost_store(run_dir, run=name)
    write_checkpoint_events(run_dir)
    return amounts


def test_spend_by_job_model_kind_and_day_sums_exactly(tmp_path: Path) -> None:
    amounts = make_run(tmp_path)
    spend = load_spend(tmp_path, ["demo"])
    # 4 rounds of: chat 0.006, image 0.08, judgment 0.00021, search 0.05, unpriced chat (known part 0).
    assert spend.total_usd == sum(amounts) == D("0.54484")
    by_job = {line.key: (line.calls, line.usd, line.unknown_calls) for line in spend.by("job")}
    assert by_job == {
        ("covers",): (4, D("0.32"), 0),
        ("labels",): (8, D("0.20084"), 0),
        ("summaries",): (8, D("0.024"), 4),
    }
    by_day = {line.key[0]: line.usd for line in spend.by("day")}
    # Charges every 2 hours from 10:00 on the 20th: 7 on the 20th, 12 on the 21st, 1 on the 22nd.
    assert list(by_day) == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert sum(by_day.values()) == D("0.54484")
    assert {line.key[0] for line in spend.by("kind")} == {"chat", "image", "judgment", "web_search"}


def test_since_keeps_charges_from_that_day_on(tmp_path: Path) -> None:
    make_run(tmp_path)
    spend = load_spend(tmp_path, ["demo"], since=date(2026, 11, 22))
    assert spend.calls == 1
    assert [line.key for line in spend.by("day")] == [("2026-11-22",)]


def test_ledger_parquet_keeps_money_as_exact_decimals(tmp_path: Path) -> None:
    make_run(tmp_path)
    load_spend(tmp_path, ["demo"])
    table = pq.read_table(tmp_path / "demo" / "ledger.parquet")
    assert table.num_rows == 20
    assert table.schema.field("usd").type == MONEY
    assert table.schema.field("price_input").type == pa.decimal128(38, 18)
    assert table.schema.field("input_tokens").type == pa.int64()
    rows = table.to_pylist()
    judgment = next(row for row in rows if row["kind"] == "judgment")
    assert judgment["usd"] == D("0.00021")  # 5000 x 0.000000042
    assert judgment["price_input"] == D("0.000000042")
    unpriced = next(row for row in rows if row["model"] == "unpriced")
    assert unpriced["usd"] is None and unpriced["priced"] is False
    assert unpriced["unknown_prices"] == "text.prompt"
    assert sum((row["usd"] or row["known_usd"] for row in rows), D(0)) == D("0.54484")


def test_report_command_prints_tables_and_writes_dashboards(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "first")
    make_run(tmp_path / "runs", "second")
    dashboards = tmp_path / "dashboards"
    result = CliRunner().invoke(
        app, ["report", "--runs-dir", str(tmp_path / "runs"), "--dashboards-dir", str(dashboards)]
    )
    assert result.exit_code == 0, result.output
    assert "Spend by job" in result.output and "Spend by day" in result.output
    assert "$1.089680" in result.output  # two runs of 0.54484
    assert (tmp_path / "runs" / "first" / "dashboard.html").exists()
    assert (dashboards / "relaybatch-report.html").exists()
    assert f"dashboard: {dashboards / 'relaybatch-report.html'}" in result.output.replace("\n", "")


def test_report_of_one_run_since_a_day(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "first")
    make_run(tmp_path / "runs", "second")
    arguments = ["report", "second", "--since", "2026-11-21", "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*arguments, "--dashboards-dir", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "first" not in result.output
    assert "2026-11-20" not in result.output


def test_report_errors_are_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    bad_day = CliRunner().invoke(
        app, ["report", "--since", "yesterday", "--runs-dir", str(tmp_path / "runs")]
    )
    assert bad_day.exit_code == 1
    assert "--since 'yesterday'" in bad_day.output
    missing = CliRunner().invoke(app, ["report", "nope", "--runs-dir", str(tmp_path / "runs")])
    assert missing.exit_code == 1
    assert "no run named nope" in missing.output
    assert "Traceback" not in missing.output


def test_error_labels_keep_status_and_type() -> None:
    events = [
        {"key": "a", "state": "sending", "at": "2026-11-20T10:00:00+00:00"},
        {
            "key": "a",
            "state": "pending",
            "detail": "429 rate_limit_error: slow down",
            "at": "2026-11-20T10:00:01+00:00",
        },
        {"key": "a", "state": "sending", "at": "2026-11-20T10:00:02+00:00"},
        {"key": "a", "state": "failed", "detail": "gave up after 5 attempts: 529 overloaded_error: busy"}
        | {"at": "2026-11-20T10:00:03+00:00", "kind": "chat"},
    ]
    activity = activity_from_events(events)
    assert dict(activity.errors) == {"429 rate_limit_error": 1, "529 overloaded_error": 1}
    assert [(label, count) for label, count in activity.latency_histogram if count] == [("<=1s", 1)]


def test_dashboard_of_an_empty_run_says_so() -> None:
    html = render_dashboard(DashboardData([]), "nothing")
    assert html.count('data-empty="true"') == 12  # every chart, spend per day by model and by job too
    assert "$0.000000" in html


def test_a_sharded_run_reports_every_shard(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "big"
    for shard in ("1-of-2", "2-of-2"):
        folder = run_dir / "shards" / shard
        folder.mkdir(parents=True)
        fill_cost_store(folder, run="big")
        store = CostStore(folder / "costs.sqlite")  # its owner's execution ends: its ledger.parquet
        try:
            write_ledger(store, folder / "ledger.parquet")
        finally:
            store.close()
        (folder / "costs.sqlite").unlink()  # a shard's store is its host's: the report reads the file
    spend = load_spend(tmp_path / "runs", [])  # found without naming it: it has shards
    assert spend.runs == ["big"]
    assert spend.calls == 40
    assert spend.total_usd == 2 * D("0.54484")
    assert [line.key for line in spend.by("run")] == [("big",)]


def test_long_runs_stay_small_on_the_page() -> None:
    per_minute = {
        f"2026-11-{day:02d}T{hour:02d}:{minute:02d}": D("0.01")
        for day in (20, 21)
        for hour in range(24)
        for minute in range(60)
    }
    spend = RunSpend(["long"], per_minute=per_minute)
    points = spend.over_time()
    assert len(points) <= MAX_TIME_POINTS + 1
    assert points[-1] == ("2026-11-21T23:59", D("28.80"))  # the last point is the exact total


def test_unknown_outcomes_are_reported_apart_at_their_worst_case(tmp_path: Path) -> None:
    from cost_builders import unknown_video_row

    from relaybatch.costs.ledger import CostStore
    from relaybatch.costs.report import run_spend_figures

    amounts = make_run(tmp_path)
    store = CostStore(tmp_path / "demo" / "costs.sqlite")
    try:
        store.record(unknown_video_row("covers", "lost", "lost-key"))
        assert store.spent()[0] == sum(amounts) + D("0.40")  # what the budget counts
    finally:
        store.close()

    spend = run_spend_figures(tmp_path / "demo")
    assert (spend.known_usd, spend.unknown_usd, spend.total_usd) == (
        sum(amounts),
        D("0.40"),
        sum(amounts) + D("0.40"),
    )
    assert spend.unknown_outcomes == 1
    covers = {line.key: line for line in spend.by("job")}[("covers",)]
    assert (covers.usd, covers.unknown_usd, covers.total_usd) == (D("0.32"), D("0.40"), D("0.72"))

    result = CliRunner().invoke(
        app, ["report", "demo", "--runs-dir", str(tmp_path), "--dashboards-dir", str(tmp_path / "d")]
    )
    assert result.exit_code == 0, result.output
    assert "unknown (worst case) $0.400000 for 1 call(s) sent with no answer recorded" in " ".join(
        result.output.split()
    )


def test_prefect_spend_lines_are_the_ledgers_figures_with_unknown_outcomes(tmp_path: Path) -> None:
    """The Prefect summary and cost-report artifacts read the cost ledger, as `relaybatch report`
    does: a call sent with no answer counts at its worst case there too (not only answered items)."""
    from cost_builders import unknown_video_row
    from relaybatch.flows.summary import summary_markdown

    from relaybatch.costs.ledger import CostStore
    from relaybatch.costs.report import run_spend_figures
    from relaybatch.run import spend_lines, total_spend

    make_run(tmp_path)
    store = CostStore(tmp_path / "demo" / "costs.sqlite")
    try:
        store.record(unknown_video_row("covers", "lost", "lost-key"))
    finally:
        store.close()
    report = run_spend_figures(tmp_path / "demo", export=False)

    lines = spend_lines([tmp_path / "demo"])

    by_pair = {(line.job, line.model): line for line in lines}
    for line in report.by("job", "model"):
        found = by_pair[(line.key[0], line.key[1])]
        assert (found.usd, found.unknown_usd) == (line.usd, line.unknown_usd)
    assert total_spend(lines) == report.total_usd and report.unknown_usd == D("0.40")
    assert lines[0].total_usd == max(line.total_usd for line in lines)  # largest first
    text = summary_markdown("demo", {"done": 1}, lines, [], [])
    known, unknown, total = report.known_usd, report.unknown_usd, report.total_usd
    assert f"| **total** | | **{known}** | **{unknown}** | **{total}** |" in text


def test_dashboard_time_buckets_widen_for_long_runs_and_keep_the_total() -> None:
    buckets = TimeBuckets()
    start = datetime(2026, 11, 20, tzinfo=UTC)
    for second in range(0, 2 * 86400, 30):  # two days, a charge every 30 s
        buckets.add(start + timedelta(seconds=second), {"usd": D("0.01")})
    points = buckets.cumulative("usd")
    assert len(points) <= MAX_BUCKETS
    assert buckets.seconds == 600
    assert points[0][0] == "2026-11-20T00:00:00+00:00"
    assert points[-1][1]["usd"] == D("57.60")  # 5,760 charges, none lost in the merge


def _store_with_an_unknown_call(folder: Path) -> None:
    """A store folder (an empty checkpoint beside it) whose cost store holds one call sent with no
    answer recorded: kv1:attempt-1, a video of job "clips"."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoint.sqlite").touch()
    store = CostStore(folder / "costs.sqlite")
    try:
        store.record(unknown_video_row("clips", "v1", "kv1", call="attempt-1"))
    finally:
        store.close()


def test_resolve_lists_unknown_outcomes_and_settles_one_from_the_bill(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    _store_with_an_unknown_call(run_dir)
    runner, where = CliRunner(), ["--runs-dir", str(tmp_path)]

    listed = runner.invoke(app, ["resolve", "demo", *where])
    assert listed.exit_code == 0, listed.output
    assert "kv1:attempt-1" in listed.output and "1 call(s) sent with no answer recorded" in listed.output

    both = runner.invoke(
        app, ["resolve", "demo", "kv1:attempt-1", "--charged", "0.4", "--not-charged", *where]
    )
    assert both.exit_code == 1 and "exactly one of" in both.output
    wrong = runner.invoke(app, ["resolve", "demo", "nope", "--not-charged", *where])
    assert wrong.exit_code == 1 and "no unknown outcome 'nope'" in wrong.output

    settled = runner.invoke(app, ["resolve", "demo", "kv1:attempt-1", "--charged", "0.40", *where])
    assert settled.exit_code == 0, settled.output
    store = CostStore(run_dir / "costs.sqlite")
    try:
        assert store.unknown_outcomes() == [] and store.spent()[0] == D("0.40")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("verdict", "state"), [(["--not-charged"], "pending"), (["--charged", "0.40"], "failed")]
)
def test_resolve_moves_the_uncertain_item_as_the_bill_says(
    tmp_path: Path, verdict: list[str], state: str
) -> None:
    """Not charged: the item was never billed, so it is sendable again (it stayed uncertain, and
    only `uncertain: resend` could make it, paying twice for the calls that were charged). Charged:
    failed with the charge as its reason, so the run has nothing left to decide."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.engine.store import Change
    from relaybatch.manifests import Item

    run_dir = tmp_path / "demo"
    run_dir.mkdir()
    request = {"model": "m", "prompt": "p"}
    clip = Item.build(item_id="v1", job="clips", kind="video", request=request, carry={})
    with CheckpointStore(run_dir / "checkpoint.sqlite") as checkpoint:
        checkpoint.add_items([clip])
        checkpoint.apply([Change(clip.key, "sending", {"attempts": 1})])
        checkpoint.apply([Change(clip.key, "uncertain", {"last_error": "interrupted"})])
    costs = CostStore(run_dir / "costs.sqlite")
    try:
        costs.record(unknown_video_row("clips", "v1", clip.key, call="attempt-1"))
    finally:
        costs.close()

    settled = CliRunner().invoke(
        app, ["resolve", "demo", f"{clip.key}:attempt-1", *verdict, "--runs-dir", str(tmp_path)]
    )

    assert settled.exit_code == 0, settled.output
    assert f"its item is {state}" in settled.output
    with CheckpointStore(run_dir / "checkpoint.sqlite") as checkpoint:
        item = checkpoint.item(clip.key)
    assert item["state"] == state
    assert (item["last_error"] is None) == (state == "pending")
    if state == "failed":
        assert "charged $0.40" in item["last_error"] and "never recorded" in item["last_error"]


def test_listing_unknown_outcomes_only_reads_the_store(tmp_path: Path) -> None:
    """`relaybatch resolve RUN` (no CALL) opens the cost store read-only, so it needs no folder
    lock: beside an engine's commit in progress (a write transaction held) it lists at once (was: it
    opened the store for writing, waited 10 s for SQLite's write lock and died with a traceback), and
    a layout-0 store stays as it is (was: migrated by a listing, under whoever held the lock)."""
    import sqlite3

    run_dir = tmp_path / "demo"
    _store_with_an_unknown_call(run_dir)
    engine = sqlite3.connect(run_dir / "costs.sqlite", isolation_level=None)
    try:
        engine.execute("PRAGMA busy_timeout=0")
        engine.execute("begin immediate")  # an execution's commit in progress
        engine.execute("update changes set count = count + 1")
        listed = CliRunner().invoke(app, ["resolve", "demo", "--runs-dir", str(tmp_path)])
        engine.execute("commit")  # the listing took no lock the engine's commit needs
    finally:
        engine.close()
    assert listed.exit_code == 0, listed.output
    assert "kv1:attempt-1" in listed.output and "1 call(s) sent with no answer recorded" in listed.output

    old = tmp_path / "old"
    old.mkdir()
    (old / "checkpoint.sqlite").touch()
    connection = sqlite3.connect(old / "costs.sqlite")
    try:
        connection.executescript(
            (Path(__file__).parent / "fixtures" / "costs_layout0.sql").read_text(encoding="utf-8")
        )
    finally:
        connection.close()
    listed = CliRunner().invoke(app, ["resolve", "old", "--runs-dir", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    assert "aa11bb22cc33dd44ee55ff6600778899:create" in listed.output, listed.output
    assert "2 call(s) sent with no answer recorded" in listed.output  # and the reservation left open
    connection = sqlite3.connect(old / "costs.sqlite")
    try:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 0  # not migrated
        kind = connection.execute("select type from sqlite_schema where name = 'charges'").fetchone()
        assert kind == ("table",)
    finally:
        connection.close()


def _shard_let_go_with_an_unknown_call(folder: Path, item_key: str) -> None:
    """A shard's store folder as its owner leaves it: checkpoint and cost store (one call sent with
    no answer recorded, ``<item_key>:attempt-1``), its ledger.parquet and its exact progress.json."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.run.progress_file import write_exact
    from relaybatch.run_folder import RunPaths

    folder.mkdir(parents=True)
    CheckpointStore(folder / "checkpoint.sqlite").close()
    store = CostStore(folder / "costs.sqlite")
    try:
        store.record(unknown_video_row("clips", item_key, item_key, call="attempt-1"))
        write_ledger(store, folder / "ledger.parquet")
    finally:
        store.close()
    write_exact(RunPaths(folder))


def test_resolve_lists_the_calls_of_shards_from_their_ledger_files_without_opening_their_stores(
    tmp_path: Path,
) -> None:
    """`relaybatch resolve RUN` lists a shard's or partition's calls from the ledger.parquet its owner
    wrote when it let go, never its SQLite (another host's, perhaps: here not even a database); a
    shard whose execution was killed before it wrote them has them written again first, under its
    lock for a moment, so the calls that execution left are listed too; one executing now (its lock
    held) is listed as of its last end, and the listing says so."""
    import fcntl
    import json
    import os

    run_dir = tmp_path / "demo"
    gone, killed = run_dir / "shards" / "1-of-2", run_dir / "shards" / "2-of-2"
    _shard_let_go_with_an_unknown_call(gone, "kv1")
    _shard_let_go_with_an_unknown_call(killed, "kv2")
    store = CostStore(killed / "costs.sqlite")
    try:  # a later execution, killed with a call sent: its ledger and progress not written since
        store.record(unknown_video_row("clips", "kv3", "kv3", call="attempt-1"))
    finally:
        store.close()
    progress = json.loads((killed / "progress.json").read_text())
    (killed / "progress.json").write_text(json.dumps({**progress, "live": True}))
    for name in ("checkpoint.sqlite", "costs.sqlite"):
        (gone / name).write_bytes(b"not a database: opening it would fail")

    listed = CliRunner().invoke(app, ["resolve", "demo", "--runs-dir", str(tmp_path)], terminal_width=200)

    assert listed.exit_code == 0, listed.output
    assert "3 call(s) sent with no answer recorded" in listed.output, listed.output
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in listed.output.splitlines()
        if line.count("│") > 3 and "attempt-1" in line
    }
    assert rows == {"kv1:attempt-1": "1/2", "kv2:attempt-1": "2/2", "kv3:attempt-1": "2/2"}, listed.output
    assert not json.loads((killed / "progress.json").read_text())["live"]  # written exactly

    holder = {"activity": "executing shard 1/2 of run 'demo'", "pid": 4242, "host": "host-b"}
    (gone / "execution.lock").write_text(json.dumps(holder))
    descriptor = os.open(gone / "execution.lock", os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as host-b's execution holds it
        busy = CliRunner().invoke(app, ["resolve", "demo", "--runs-dir", str(tmp_path)], terminal_width=400)
    finally:
        os.close(descriptor)
    assert busy.exit_code == 0 and "3 call(s) sent with no answer recorded" in busy.output, busy.output
    assert "pid 4242 on host-b; its calls are listed as of its last execution's end" in busy.output


def test_resolve_names_the_stores_of_a_call_id_found_in_several_and_settles_the_one_named(
    tmp_path: Path,
) -> None:
    """The same call id unknown in the run's store and a shard's is two calls on the bill: settling it
    without --store is refused naming both stores; --store settles that store's alone."""
    run_dir = tmp_path / "demo"
    shard = run_dir / "shards" / "1-of-2"
    for folder in (run_dir, shard):
        _store_with_an_unknown_call(folder)
    runner, where = CliRunner(), ["--runs-dir", str(tmp_path)]

    listed = runner.invoke(app, ["resolve", "demo", *where])
    assert listed.exit_code == 0, listed.output
    assert "2 call(s) sent with no answer recorded" in listed.output
    both = runner.invoke(app, ["resolve", "demo", "kv1:attempt-1", "--not-charged", *where])
    assert both.exit_code == 1 and "in 2 stores of run demo (run, 1/2)" in both.output, both.output
    bad = runner.invoke(app, ["resolve", "demo", "kv1:attempt-1", "--not-charged", "--store", "one", *where])
    assert bad.exit_code == 1 and "--store 'one'" in bad.output, bad.output

    settled = runner.invoke(
        app, ["resolve", "demo", "kv1:attempt-1", "--not-charged", "--store", "1/2", *where]
    )
    assert settled.exit_code == 0, settled.output
    assert "kv1:attempt-1 (shard 1/2): not charged" in settled.output
    for folder, left in ((run_dir, 1), (shard, 0)):
        store = CostStore(folder / "costs.sqlite")
        try:
            assert len(store.unknown_outcomes()) == left
        finally:
            store.close()
    assert (shard / "ledger.parquet").exists() and not (run_dir / "ledger.parquet").exists()
