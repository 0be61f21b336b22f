"""The dashboard opens in headless Chromium with no network, and its charts draw."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cost_builders import CHAT_PRICES, START, build_row, fill_cost_store, sample_rows, write_checkpoint_events
from PIL import Image

from relaybatch.costs.dashboard import PALETTE, write_dashboard
from relaybatch.costs.dashboard_data import load_dashboard

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1400,2400",
    # Timers and promises run to the end before the DOM is dumped or the screenshot taken.
    "--virtual-time-budget=15000",
    "--enable-logging=stderr",
    "--v=0",
]
CHARTS = (
    "spend-over-time",
    "tokens-over-time",
    "spend-by-model",
    "spend-by-job",
    "spend-by-day-model",
    "spend-by-day-job",
    "latency",
    "errors",
    "limiter",
    "throughput",
    "run-state",
    "budget",
)


def _processes_using(marker: str) -> list[int]:
    """Pids whose command line mentions ``marker`` (our private profile folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def run_chromium(chromium: Path, profile: Path, *args: str) -> tuple[str, str]:
    """Run Chromium once in its own session; whatever it leaves behind is stopped by pid."""
    command = [str(chromium), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        output, errors = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in _processes_using(str(profile)):
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 0, errors[-2000:]
    return output, errors


def _wait_until_gone(marker: str) -> list[int]:
    for _ in range(50):
        left = _processes_using(marker)
        if not left:
            return []
        time.sleep(0.1)
    return _processes_using(marker)


@pytest.fixture
def dashboard(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "demo"
    run_dir.mkdir(parents=True)
    fill_cost_store(run_dir)
    write_checkpoint_events(run_dir)
    data = load_dashboard(tmp_path / "runs", ["demo"])
    return write_dashboard(data, run_dir / "dashboard.html", "relaybatch: demo")


def fill_amounts() -> list[Any]:
    return [row.cost.usd if row.cost.usd is not None else row.cost.known_usd for row in sample_rows()]


def _attributes(dom: str, chart: str) -> dict[str, str]:
    found = re.search(rf'<div [^>]*data-chart="{chart}"[^>]*>', dom)
    assert found, chart
    return dict(re.findall(r'([a-z-]+)="([^"]*)"', found.group(0)))


def _figures(html: str) -> dict[str, Any]:
    found = re.search(r"window\.RELAYBATCH_CHARTS = (\{.*?\});", html, flags=re.S)
    assert found
    figures: dict[str, Any] = json.loads(found.group(1).replace("<\\/", "</"))
    return figures


def test_the_page_is_self_contained(dashboard: Path) -> None:
    html = dashboard.read_text()
    # Nothing is loaded from elsewhere: no external script, stylesheet, image or font.
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""", html)
    assert "<script>" in html and "Plotly.newPlot" in html


def test_the_charts_hold_the_runs_figures(dashboard: Path) -> None:
    figures = _figures(dashboard.read_text())
    assert set(figures) == set(CHARTS)
    amounts = sorted(fill_amounts(), reverse=True)
    by_model = figures["spend-by-model"]["data"][0]
    assert by_model["x"] == sorted(by_model["x"], reverse=True)  # largest first
    assert by_model["y"][0] == "image-model"
    spend = figures["spend-over-time"]["data"][0]
    assert spend["y"][-1] == pytest.approx(float(sum(amounts)))
    assert spend["text"][-1] == "$0.544840"
    assert len(spend["x"]) == 20 and spend["x"][0].startswith("2026-11-20T10:00:00")
    latency = {
        trace["name"]: dict(zip(trace["x"], trace["y"], strict=True)) for trace in figures["latency"]["data"]
    }
    assert set(latency) == {"p50", "p90", "p99"}
    assert latency["p50"]["chat"] <= latency["p90"]["chat"] <= latency["p99"]["chat"]
    assert latency["p99"]["chat"] == pytest.approx(0.8, rel=0.05)  # sample latencies 0.2 to 0.8 s
    errors = figures["errors"]["data"]
    assert [trace["name"] for trace in errors] == ["429 rate_limit_error"]
    assert sum(errors[0]["y"]) == 3
    limiter = figures["limiter"]["data"]
    assert limiter[0]["y"][:3] == [600, 118.8, 118.8]
    assert limiter[0]["x"][-1] == "2026-11-22T00:00:00+00:00"  # held to the last charge
    assert sum(limiter[1]["y"]) == 2


def _day_model_usd() -> dict[tuple[str, str], Any]:
    """What each model spent each UTC day in the sample charges, as the report counts it."""
    from decimal import Decimal

    from relaybatch.costs.ledger import budget_amount, flat_record

    totals: dict[tuple[str, str], Decimal] = {}
    for row in sample_rows():
        key = (row.charged_at.date().isoformat(), row.model)
        totals[key] = totals.get(key, Decimal(0)) + budget_amount(flat_record(row))
    return totals


def test_the_spend_per_day_by_model_chart_holds_each_days_figures(dashboard: Path) -> None:
    chart = _figures(dashboard.read_text())["spend-by-day-model"]
    drawn = {
        (day, trace["name"]): (usd, text)
        for trace in chart["data"]
        for day, usd, text in zip(trace["x"], trace["y"], trace["text"], strict=True)
        if usd
    }
    expected = _day_model_usd()
    assert set(drawn) == {key for key, usd in expected.items() if usd}
    for key, usd in expected.items():
        if usd:
            assert (
                drawn[key][0] == pytest.approx(float(usd))
                and drawn[key][1] == f"${usd.quantize(Decimal('0.000001')):,}"
            )
    assert chart["layout"]["barmode"] == "stack"


def test_dashboard_charts_draw_in_headless_chromium(chromium: Path, dashboard: Path, tmp_path: Path) -> None:
    profile = tmp_path / "chromium-profile"

    dom, log = run_chromium(chromium, profile, "--dump-dom", dashboard.as_uri())

    assert f'data-charts-drawn="{len(CHARTS)}"' in dom, log[-3000:]
    assert "data-errors=" not in dom
    assert "Uncaught" not in log and ":ERROR:CONSOLE" not in log, log[-3000:]
    for chart in CHARTS:
        attributes = _attributes(dom, chart)
        assert int(attributes.get("data-drawn-points", "0")) > 0, (chart, attributes)
    assert int(_attributes(dom, "spend-over-time")["data-drawn-points"]) >= 20
    # Spend per day by model: a stacked bar per (day, model) that spent, one trace per model.
    per_day_model = _attributes(dom, "spend-by-day-model")
    assert int(per_day_model["data-traces"]) == len({model for _, model in _day_model_usd()})
    assert int(per_day_model["data-drawn-points"]) >= len(_day_model_usd())

    screenshot = tmp_path / "dashboard.png"
    run_chromium(chromium, profile, f"--screenshot={screenshot}", dashboard.as_uri())
    image = Image.open(screenshot).convert("RGB")
    colours = image.getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 50, "the screenshot is blank"
    chart_blue = tuple(int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    blue_pixels = sum(count for count, colour in colours if colour == chart_blue)
    assert blue_pixels > 2000, "the charts' bars and line did not draw"

    assert _wait_until_gone(str(profile)) == [], "Chromium processes outlived the test"


def test_charts_of_many_long_names_stay_in_their_cards(chromium: Path, tmp_path: Path) -> None:
    """Twelve jobs with long names: each bar chart and its legend fit the chart's card (the spend
    by job chart spilled over the card below it, and the day chart's legend covered its axis title)."""
    from relaybatch.cost_model import price_call
    from relaybatch.cost_model.usage import UsageCounts
    from relaybatch.costs.dashboard_data import DashboardData
    from relaybatch.costs.ledger import flat_record

    data = DashboardData(["nightly"])
    for index in range(12):
        usage = UsageCounts(input_tokens=1000 * (index + 1), output_tokens=200)
        row = build_row(
            run="nightly",
            job=f"summarise-paragraphs-of-section-{index:02d}",
            item_id=f"p{index}",
            item_key=f"key{index:03d}",
            kind="chat",
            model=f"relay-chat-model-{index % 6}",
            provider=None,
            usage=usage,
            cost=price_call(CHAT_PRICES, usage),
            charged_at=START + timedelta(hours=index * 5),
            latency_seconds=0.2,
        )
        data.add_charge(flat_record(row))
    page = write_dashboard(data, tmp_path / "dashboard.html", "relaybatch: nightly")

    dom, log = run_chromium(chromium, tmp_path / "chromium-profile", "--dump-dom", page.as_uri())

    assert "data-charts-drawn=" in dom, log[-3000:]
    problems = re.findall(r'data-chart="([^"]+)"[^>]*data-layout-problems="([^"]*)"', dom)
    assert problems == [], problems


def test_a_budget_that_stopped_work_is_marked_stopped_with_what_it_needed() -> None:
    from relaybatch.cost_model import Budgets
    from relaybatch.costs.dashboard import budget_use
    from relaybatch.costs.dashboard_data import DashboardData
    from relaybatch.costs.ledger import flat_record

    data = DashboardData(["demo"])
    for row in sample_rows():
        data.add_charge(flat_record(row))
    data.budgets = {"demo": Budgets(run_usd=Decimal("0.60"), job_usd={"covers": Decimal("0.50")})}
    data.stopped = [
        "run budget of 0.60 USD reached: 0.544840 USD spent, 0 USD in flight, item covers/i9 may cost "
        "up to 0.1 USD. Raise budget_usd and run the manifest again to resume."
    ]

    labels = budget_use(data).data[0].y  # type: ignore[union-attr]

    assert labels[0] == "run budget: STOPPED, the next item needed up to $0.100000"
    assert labels[1] == "job covers"  # its own budget stopped nothing


def test_the_pages_of_a_runs_folder_share_one_library_and_still_draw_offline(
    chromium: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    pages = []
    for name in ("demo", "other"):
        run_dir = runs / name
        run_dir.mkdir(parents=True)
        fill_cost_store(run_dir, run=name)
        write_checkpoint_events(run_dir)
        data = load_dashboard(runs, [name])
        pages.append(
            write_dashboard(data, run_dir / "dashboard.html", f"relaybatch: {name}", library_dir=runs)
        )

    libraries = list(runs.glob("plotly-*.min.js"))
    assert len(libraries) == 1 and libraries[0].stat().st_size > 1_000_000
    assert all(page.stat().st_size < 200_000 for page in pages)  # was 4.8 MB each, the library inline
    assert f'<script src="../{libraries[0].name}">' in pages[0].read_text()

    dom, log = run_chromium(chromium, tmp_path / "chromium-profile", "--dump-dom", pages[1].as_uri())
    assert f'data-charts-drawn="{len(CHARTS)}"' in dom, log[-3000:]
    assert "data-errors=" not in dom
