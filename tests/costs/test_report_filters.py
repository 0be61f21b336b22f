"""A filtered report (`--since`, some runs) never replaces a run's own dashboard or the combined
one: it writes its own file, named after the filter, with the filter in its title."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.conftest import Cli


def test_a_filtered_report_leaves_every_dashboard_byte_identical(tmp_path: Path, cli: Cli) -> None:
    run = cli
    runs, boards = tmp_path / "runs", tmp_path / "boards"
    for name in ("alpha", "beta"):
        manifest = tmp_path / f"{name}.csv"
        manifest.write_text("id,model,prompt,max_tokens\np0,relay-chat-small,Say hello.,16\n")
        assert run("run", str(manifest), "--runs-dir", str(runs))[0] == 0
    common = ("--runs-dir", str(runs), "--dashboards-dir", str(boards))
    assert run("report", *common)[0] == 0
    pages = [runs / name / "dashboard.html" for name in ("alpha", "beta")] + [
        boards / "relaybatch-report.html"
    ]
    before = [page.read_bytes() for page in pages]
    tomorrow = datetime.now(UTC).date().replace(year=datetime.now(UTC).year + 1).isoformat()

    code, output = run("report", "--since", tomorrow, *common)
    assert code == 0, output
    assert [page.read_bytes() for page in pages] == before

    code, output = run("report", "--since", "2020-01-01", "--until", "2020-01-31", *common)
    assert code == 0, output
    assert [page.read_bytes() for page in pages] == before
    window = (boards / "relaybatch-report-since-2020-01-01-until-2020-01-31.html").read_text(encoding="utf-8")
    assert "relaybatch: every run; since 2020-01-01 (UTC); until 2020-01-31 (UTC)" in window
    assert "$0.000000" in window  # nothing was charged in that month
    code, output = run("report", "--since", "2020-02-01", "--until", "2020-01-31", *common)
    assert code == 1 and "--until 2020-01-31: before --since 2020-02-01" in output

    code, output = run("report", "alpha", *common)  # alpha's own page shows alpha whole, as before
    assert code == 0, output
    assert [page.read_bytes() for page in pages[1:]] == before[1:]
    since = (boards / f"relaybatch-report-since-{tomorrow}.html").read_text(encoding="utf-8")
    assert f"relaybatch: every run; since {tomorrow} (UTC)" in since
    subset = (boards / "relaybatch-report-alpha.html").read_text(encoding="utf-8")
    assert "relaybatch: runs alpha" in subset


def test_report_by_day_and_model_writes_the_table_as_csv_and_parquet(tmp_path: Path, cli: Cli) -> None:
    run = cli
    import csv
    from decimal import Decimal

    import pyarrow.parquet as pq

    runs, boards = tmp_path / "runs", tmp_path / "boards"
    manifest = tmp_path / "gamma.csv"
    manifest.write_text(
        "id,model,prompt,max_tokens\np0,relay-chat-small,Say hello.,16\np1,relay-chat-small,Hi.,16\n"
    )
    assert run("run", str(manifest), "--runs-dir", str(runs))[0] == 0
    common = ("--runs-dir", str(runs), "--dashboards-dir", str(boards))

    code, output = run("report", *common, "--by", "day,model", "--output", str(tmp_path / "spend.csv"))
    assert code == 0, output
    assert "Spend by day, model" in output
    with (tmp_path / "spend.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["model"], row["calls"]) for row in rows] == [("relay-chat-small", "2")]
    assert rows[0]["day"] == rows[0]["day"][:10] and Decimal(rows[0]["total_usd"]) > 0

    code, output = run("report", *common, "--by", "day,model", "--output", str(tmp_path / "spend.parquet"))
    assert code == 0, output
    table = pq.read_table(tmp_path / "spend.parquet").to_pylist()
    assert table[0]["total_usd"] == Decimal(rows[0]["total_usd"])

    code, output = run("report", *common, "--by", "colour")
    assert code == 1 and "--by 'colour': group by one or more of run, job, model" in output
