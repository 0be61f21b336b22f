"""The dashboard opens in headless Chromium with no network, and its charts draw."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cost_builders import fill_cost_store, write_checkpoint_events
from PIL import Image

from relaybatch.costs import load_spend
from relaybatch.costs.dashboard import PALETTE, write_dashboard

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
    "--window-size=1400,1800",
]
CHARTS = ("spend-over-time", "spend-by-model", "spend-by-job", "throughput", "latency", "errors")


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


def run_chromium(chromium: Path, profile: Path, *args: str) -> str:
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
    return output


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
    spend = load_spend(tmp_path / "runs", ["demo"])
    return write_dashboard(spend, run_dir / "dashboard.html", "relaybatch: demo")


def test_dashboard_charts_draw_in_headless_chromium(chromium: Path, dashboard: Path, tmp_path: Path) -> None:
    profile = tmp_path / "chromium-profile"
    html = dashboard.read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html

    dom = run_chromium(chromium, profile, "--dump-dom", dashboard.as_uri())
    for chart in CHARTS:
        assert f'data-chart="{chart}"' in dom, chart
    assert dom.count('class="bar"') >= 10
    assert dom.count('class="point"') == 20
    assert 'data-empty="true"' not in dom

    screenshot = tmp_path / "dashboard.png"
    run_chromium(chromium, profile, f"--screenshot={screenshot}", dashboard.as_uri())
    image = Image.open(screenshot).convert("RGB")
    colours = image.getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 50, "the screenshot is blank"
    chart_blue = tuple(int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    blue_pixels = sum(count for count, colour in colours if colour == chart_blue)
    assert blue_pixels > 2000, "the charts' bars and line did not draw"

    assert _wait_until_gone(str(profile)) == [], "Chromium processes outlived the test"
