"""A self-contained HTML dashboard: inline SVG charts and inline CSS, no script, no network.

Every chart is an ``<svg data-chart=NAME>`` whose marks carry ``data-label`` and ``data-value``,
so a test (or a curious reader) can check what was drawn without parsing pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from html import escape
from pathlib import Path

from relaybatch.costs.report import RunSpend, SpendLine, display_usd
from relaybatch.files import write_text_atomically

WIDTH, BAR_HEIGHT, LABEL_WIDTH, GAP = 640, 22, 220, 6
PALETTE = ("#2f6fdf", "#1f9d74", "#d9822b", "#b04fc2", "#c23b4f", "#5a6b7d")

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fbfcfe; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.meta { color: #5a6b7d; margin-bottom: 16px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.card { background: #fff; border: 1px solid #dde3ec; border-radius: 8px; padding: 10px 16px; }
.card { min-width: 150px; }
.card b { display: block; font-size: 20px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(660px, 1fr)); gap: 8px 24px; }
svg { background: #fff; border: 1px solid #dde3ec; border-radius: 8px; }
svg text { font: 12px system-ui, sans-serif; fill: #1d2330; }
table { border-collapse: collapse; background: #fff; }
td, th { border: 1px solid #dde3ec; padding: 4px 10px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
"""


def _number(value: Decimal | float | int) -> str:
    return str(Decimal(str(value)).quantize(Decimal("0.1")))


def _empty(name: str, title: str) -> str:
    return (
        f'<svg data-chart="{name}" data-points="0" width="{WIDTH}" height="60" role="img" '
        f'aria-label="{escape(title)}"><text x="16" y="35" data-empty="true">No data yet</text></svg>'
    )


def bar_chart(
    name: str, title: str, bars: Sequence[tuple[str, Decimal | int | float]], unit: str = ""
) -> str:
    """Horizontal bars, one per label, scaled to the largest value."""
    if not bars:
        return _empty(name, title)
    top = max((Decimal(str(value)) for _, value in bars), default=Decimal(0)) or Decimal(1)
    span = Decimal(WIDTH - LABEL_WIDTH - 110)
    height = len(bars) * (BAR_HEIGHT + GAP) + GAP
    marks = []
    for index, (label, value) in enumerate(bars):
        y = GAP + index * (BAR_HEIGHT + GAP)
        width = max(Decimal(1), Decimal(str(value)) / top * span)
        shown = display_usd(Decimal(str(value))) if unit == "usd" else f"{value}{unit}"
        marks.append(
            f'<text x="8" y="{y + 15}">{escape(label[:34])}</text>'
            f'<rect class="bar" x="{LABEL_WIDTH}" y="{y}" width="{_number(width)}" height="{BAR_HEIGHT}" '
            f'fill="{PALETTE[index % len(PALETTE)]}" data-label="{escape(label)}" data-value="{value}">'
            # The label may be cut short on the left; the tooltip always has it whole.
            f"<title>{escape(label)}: {escape(shown)}</title></rect>"
            f'<text x="{_number(LABEL_WIDTH + width + 6)}" y="{y + 15}">{escape(shown)}</text>'
        )
    return (
        f'<svg data-chart="{name}" data-points="{len(bars)}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{escape(title)}">{"".join(marks)}</svg>'
    )


def column_chart(name: str, title: str, columns: Sequence[tuple[str, int | float]], unit: str) -> str:
    """Vertical columns in order (time buckets, histogram bins), labels under the first and last."""
    if not columns:
        return _empty(name, title)
    height, base, left = 220, 180, 48
    top = max(float(value) for _, value in columns) or 1.0
    step = (WIDTH - left - 16) / len(columns)
    marks = [f'<text x="4" y="20">{escape(f"{top:g}{unit}")}</text>']
    for index, (label, value) in enumerate(columns):
        bar = float(value) / top * (base - 24)
        x = left + index * step
        marks.append(
            f'<rect class="bar" x="{x:.1f}" y="{base - bar:.1f}" width="{max(step - 2, 1):.1f}" '
            f'height="{max(bar, 0.5):.1f}" fill="{PALETTE[0]}" '
            f'data-label="{escape(label)}" data-value="{value}"/>'
        )
    marks.append(f'<text x="{left}" y="{base + 18}">{escape(columns[0][0])}</text>')
    marks.append(f'<text x="{WIDTH - 16}" y="{base + 18}" text-anchor="end">{escape(columns[-1][0])}</text>')
    return (
        f'<svg data-chart="{name}" data-points="{len(columns)}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{escape(title)}">{"".join(marks)}</svg>'
    )


def line_chart(name: str, title: str, points: Sequence[tuple[str, Decimal]]) -> str:
    """Cumulative spend against time: a polyline with a dot per charge."""
    if not points:
        return _empty(name, title)
    height, base, left = 240, 200, 70
    times = [datetime.fromisoformat(at).timestamp() for at, _ in points]
    start, span = times[0], (times[-1] - times[0]) or 1.0
    top = points[-1][1] or Decimal(1)
    coordinates = []
    for moment, (_, total) in zip(times, points, strict=True):
        x = left + (moment - start) / span * (WIDTH - left - 20)
        y = base - float(total / top) * (base - 20)
        coordinates.append((x, y, total))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coordinates)
    dots = "".join(
        f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{PALETTE[0]}" data-value="{total}"/>'
        for x, y, total in coordinates
    )
    labels = (
        f'<text x="4" y="24">{escape(display_usd(top))}</text><text x="4" y="{base}">$0</text>'
        f'<text x="{left}" y="{base + 22}">{escape(points[0][0][:19])}</text>'
        f'<text x="{WIDTH - 20}" y="{base + 22}" text-anchor="end">{escape(points[-1][0][:19])}</text>'
        f'<line x1="{left}" y1="{base}" x2="{WIDTH - 20}" y2="{base}" stroke="#9aa8b8"/>'
    )
    return (
        f'<svg data-chart="{name}" data-points="{len(points)}" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">{labels}<polyline fill="none" stroke="{PALETTE[0]}" stroke-width="2" '
        f'points="{line}"/>{dots}</svg>'
    )


MAX_COLUMNS = 120


def coarsen(per_minute: Sequence[tuple[str, int]]) -> tuple[list[tuple[str, int]], str]:
    """Counts per minute, or per hour or day when a run is too long for one column a minute."""
    merged: dict[str, int] = {}
    for width, unit in ((16, "min"), (13, "hour"), (10, "day")):
        merged = {}
        for moment, count in per_minute:
            merged[moment[:width]] = merged.get(moment[:width], 0) + count
        if len(merged) <= MAX_COLUMNS:
            return sorted(merged.items()), unit
    return sorted(merged.items()), "day"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(cell)}</td>' for cell in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _label(line: SpendLine) -> str:
    """A bar's label; calls with an unknown price are called out, never shown as plain $0."""
    name = " / ".join(line.key)
    return f"{name} ({line.unknown_calls} unknown price)" if line.unknown_calls else name


def render_dashboard(spend: RunSpend, title: str) -> str:
    by_model = [(_label(line), line.usd) for line in spend.by("model")]
    by_job = [(_label(line), line.usd) for line in spend.by("run", "job")]
    activity = spend.activity
    error_total = sum(count for _, count in activity.errors)
    throughput, throughput_unit = coarsen(activity.finished_per_minute)
    cards = [
        ("Total spend", display_usd(spend.total_usd)),
        ("Billable calls", str(spend.calls)),
        ("Calls with unknown price", str(spend.unknown_calls)),
        ("Errors", str(error_total)),
    ]
    day_rows = [
        [*line.key, str(line.calls), display_usd(line.usd), str(line.unknown_calls)]
        for line in spend.by("day", "kind")
    ]
    sections = [
        ("Spend over time (cumulative)", line_chart("spend-over-time", "Spend over time", spend.over_time())),
        ("Spend by model", bar_chart("spend-by-model", "Spend by model", by_model, unit="usd")),
        ("Spend by job", bar_chart("spend-by-job", "Spend by job", by_job, unit="usd")),
        (
            f"Throughput (calls finished per {throughput_unit})",
            column_chart("throughput", "Throughput", throughput, unit=f"/{throughput_unit}"),
        ),
        ("Latency (send to answer)", column_chart("latency", "Latency", activity.latency_histogram, "")),
        ("Errors", bar_chart("errors", "Errors", activity.errors)),
    ]
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    return "".join(
        [
            '<!doctype html><html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            f'<div class="meta">Runs: {escape(", ".join(spend.runs) or "none")} · generated {generated} · '
            "amounts rounded for display; the ledger keeps full precision</div>",
            '<div class="cards">',
            *(f'<div class="card">{escape(name)}<b>{escape(value)}</b></div>' for name, value in cards),
            '</div><div class="grid">',
            *(f"<section><h2>{escape(name)}</h2>{chart}</section>" for name, chart in sections),
            "</div><h2>Spend by day and kind</h2>",
            _table(["day", "kind", "calls", "USD", "unknown price"], day_rows),
            "</body></html>",
        ]
    )


def write_dashboard(spend: RunSpend, path: Path, title: str) -> Path:
    return write_text_atomically(path, render_dashboard(spend, title))
