"""A self-contained HTML dashboard drawn with plotly.js, bundled into the page: no network.

plotly.js comes from the ``plotly`` package (``plotly.offline.get_plotlyjs``), inlined once in the
page's head; each chart is a figure built with plotly's Python API and drawn by ``Plotly.newPlot``.
Time axes are real date axes (zoom, hover, gridlines). Every chart is a ``div[data-chart=NAME]``;
once drawn, the page marks it with ``data-drawn-points`` (marks in the SVG) and ``data-traces``,
and the figures themselves are in ``window.RELAYBATCH_CHARTS``, so a test (or a curious reader)
can check what was drawn. Amounts are drawn as floats but every hover and card shows the exact
decimal, rounded to six places for display.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import escape
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io
from plotly.offline import get_plotlyjs

from relaybatch.costs.dashboard_data import PERCENTILES, UNSURE_BELOW, DashboardData
from relaybatch.costs.report import display_usd
from relaybatch.costs.run_budgets import BudgetUse
from relaybatch.files import write_text_atomically

# A horizontal legend's room in a chart card: its width, and the width of one entry's mark and of a
# character of its name (plotly's 12 px font), and the height of a row.
LEGEND_WIDTH_PX, LEGEND_MARK_PX, LEGEND_CHAR_PX, LEGEND_ROW_PX = 520, 45, 7, 21

PALETTE = ("#2f6fdf", "#1f9d74", "#d9822b", "#b04fc2", "#c23b4f", "#5a6b7d", "#8a9a2b", "#2bb0c2")

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fbfcfe; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 0 0 6px; }
.meta { color: #5a6b7d; margin-bottom: 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid #dde3ec; border-radius: 8px; padding: 8px 14px; }
.card b { display: block; font-size: 19px; font-variant-numeric: tabular-nums; }
.card small { color: #5a6b7d; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 16px;
        margin-top: 18px; }
section { background: #fff; border: 1px solid #dde3ec; border-radius: 8px; padding: 12px; min-width: 0; }
.chart { height: 320px; }
.empty { color: #5a6b7d; padding: 24px 8px; }
.budgets { margin-top: 16px; } .budgets table { border-collapse: collapse; }
.budgets th, .budgets td { padding: 3px 14px 3px 0; text-align: right; font-variant-numeric: tabular-nums; }
.budgets th:first-child, .budgets td:first-child { text-align: left; }
"""

# After every chart is drawn: mark each with what the SVG holds, and with ``data-layout-problems``
# where it spills out of its box or its legend covers its axis title; record any script error.
DRAW_SCRIPT = """
window.addEventListener("error", (e) => { document.body.dataset.errors =
  (document.body.dataset.errors || "") + (e.message || "error") + "\\n"; });
const config = {displaylogo: false, responsive: true, displayModeBar: false};
Promise.all(Object.entries(window.RELAYBATCH_CHARTS).map(([name, figure]) =>
  Plotly.newPlot(document.querySelector(`[data-chart="${name}"]`), figure.data, figure.layout, config)
)).then((charts) => {
  for (const chart of charts) {
    chart.dataset.drawnPoints = chart.querySelectorAll(".point, .scatterlayer .trace path.js-line").length;
    chart.dataset.traces = chart.data.length;
    const problems = [], box = chart.getBoundingClientRect();
    const drawn = chart.querySelector("svg.main-svg");
    if (drawn && drawn.getBoundingClientRect().height > box.height + 1) problems.push("taller than its box");
    const legend = chart.querySelector(".legend"), title = chart.querySelector(".g-xtitle");
    if (legend && title && title.getBoundingClientRect().height) {
      const a = legend.getBoundingClientRect(), b = title.getBoundingClientRect();
      if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
        problems.push("legend over the axis title");
    }
    if (problems.length) chart.dataset.layoutProblems = problems.join("; ");
  }
  document.body.dataset.chartsDrawn = charts.length;
});
"""


TIME_AXIS = {"type": "date", "title": "time (UTC)"}
# A run over in a second still gets a readable time axis: at least this span, centred on it.
MIN_TIME_SPAN = timedelta(seconds=60)


def run_span(data: DashboardData) -> tuple[datetime, datetime] | None:
    """From the first to the last moment any timeline holds, widened to ``MIN_TIME_SPAN``."""
    moments = [data.last_at] if data.last_at else []
    for series in (data.spend.series(), data.finished.series(), data.errors.series(), data.limiter.series()):
        moments += [datetime.fromisoformat(moment) for moment, _ in series[:1] + series[-1:]]
    if not moments:
        return None
    start, end = min(moments), max(moments)
    if end - start < MIN_TIME_SPAN:
        pad = (MIN_TIME_SPAN - (end - start)) / 2
        start, end = start - pad, end + pad
    return start, end


def time_axis(data: DashboardData, title: str = "time (UTC)") -> dict[str, Any]:
    """A date axis over the whole run, so every timeline chart shows the same span."""
    span = run_span(data)
    axis: dict[str, Any] = {**TIME_AXIS, "title": title}
    if span is not None:
        axis["range"] = [moment.isoformat() for moment in span]
    return axis


def _float(value: Decimal | int | float | None) -> float | None:
    return None if value is None else float(value)


def _layout(**extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "template": "plotly_white",
        "margin": {"l": 60, "r": 20, "t": 30, "b": 40},
        "hovermode": "closest",
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "colorway": list(PALETTE),
        "font": {"family": "system-ui, sans-serif", "size": 12},
    }
    layout.update(extra)
    return layout


def spend_over_time(data: DashboardData) -> go.Figure | None:
    points = data.spend.cumulative("usd")
    if not points:
        return None
    times = [moment for moment, _ in points]
    totals = [values["usd"] for _, values in points]
    return go.Figure(
        go.Scatter(
            x=times,
            y=[_float(total) for total in totals],
            mode="lines+markers",
            line={"shape": "hv"},
            name="spend",
            text=[display_usd(total) for total in totals],
            hovertemplate="%{x}<br>%{text} so far<extra></extra>",
        ),
        _layout(xaxis=time_axis(data), yaxis={"title": "USD", "rangemode": "tozero"}),
    )


def tokens_over_time(data: DashboardData) -> go.Figure | None:
    points = data.spend.cumulative("input", "output")
    if not points or not any(values["input"] or values["output"] for _, values in points):
        return None
    times = [moment for moment, _ in points]
    traces = [
        go.Scatter(x=times, y=[values[name] for _, values in points], mode="lines+markers", name=label)
        for name, label in (("input", "input tokens"), ("output", "output tokens"))
    ]
    return go.Figure(
        traces,
        _layout(xaxis=time_axis(data), yaxis={"title": "tokens", "rangemode": "tozero"}),
    )


def ranked_bars(ranked: Sequence[tuple[str, Decimal]], name: str) -> go.Figure | None:
    """Horizontal bars, largest on top."""
    if not ranked:
        return None
    labels = [label for label, _ in ranked]
    return go.Figure(
        go.Bar(
            x=[_float(usd) for _, usd in ranked],
            y=labels,
            orientation="h",
            name=name,
            marker={"color": PALETTE[0]},
            text=[display_usd(usd) for _, usd in ranked],
            textposition="auto",
            hovertemplate="%{y}: %{text}<extra></extra>",
        ),
        _layout(
            yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
            xaxis={"title": "USD", "rangemode": "tozero"},
            height=max(220, 60 + 28 * len(labels)),
        ),
    )


def latency_percentiles(data: DashboardData) -> go.Figure | None:
    percentiles = data.percentiles()
    if not percentiles:
        return None
    kinds = list(percentiles)
    traces = [
        go.Bar(
            x=kinds,
            y=[percentiles[kind][p] for kind in kinds],
            name=f"p{p}",
            hovertemplate=f"%{{x}} p{p}: %{{y:.3f}} s<extra></extra>",
        )
        for p in PERCENTILES
    ]
    return go.Figure(
        traces,
        _layout(barmode="group", yaxis={"title": "seconds (request to answer)", "rangemode": "tozero"}),
    )


def errors_over_time(data: DashboardData) -> go.Figure | None:
    named = data.error_series()
    if not named:
        return None
    series = data.errors.series()
    times = [moment for moment, _ in series]
    traces = [
        go.Bar(x=times, y=[values.get(label, 0) for _, values in series], name=label) for label in named
    ]
    other = [sum(v for k, v in values.items() if k not in named) for _, values in series]
    if any(other):
        traces.append(go.Bar(x=times, y=other, name="other"))
    return go.Figure(
        traces,
        _layout(
            barmode="stack",
            xaxis=time_axis(data, f"time (UTC), per {data.errors.seconds} s"),
            yaxis={"title": "errors"},
        ),
    )


def limiter_over_time(data: DashboardData) -> go.Figure | None:
    series = data.limiter_series()
    if not series:
        return None
    times = [moment for moment, _ in series]
    counts = [int(values.get("rate_limited") or 0) for _, values in series]
    new_429s = [count - previous for count, previous in zip(counts, [0, *counts[:-1]], strict=True)]
    return go.Figure(
        [
            go.Scatter(
                x=times,
                y=[values.get("rpm") for _, values in series],
                mode="lines+markers",
                line={"shape": "hv"},
                name="limit (requests/min)",
                connectgaps=False,
            ),
            go.Bar(x=times, y=[max(0, n) for n in new_429s], name="429s", yaxis="y2", opacity=0.6),
        ],
        _layout(
            xaxis=time_axis(data),
            yaxis={"title": "requests per minute", "rangemode": "tozero"},
            yaxis2={
                "title": "429s",
                "overlaying": "y",
                "side": "right",
                "range": [0, max(1, *new_429s) * 1.1],
                "dtick": max(1, math.ceil(max(new_429s) / 5)),
                "showgrid": False,
            },
        ),
    )


def throughput(data: DashboardData) -> go.Figure | None:
    series = data.finished.series()
    if not series:
        return None
    return go.Figure(
        go.Bar(x=[moment for moment, _ in series], y=[values["items"] for _, values in series], name="items"),
        _layout(
            xaxis=time_axis(data, f"time (UTC), per {data.finished.seconds} s"),
            yaxis={"title": "items finished"},
        ),
    )


def run_state(data: DashboardData) -> go.Figure | None:
    if not data.states:
        return None
    states = sorted(data.states, key=lambda state: -data.states[state])
    return go.Figure(
        go.Bar(
            x=states, y=[data.states[state] for state in states], name="items", marker={"color": PALETTE[1]}
        ),
        _layout(yaxis={"title": "items"}),
    )


def budget_use(data: DashboardData) -> go.Figure | None:
    """One bar per budget (the run's, then each job's): what it counts as spent, and what is left.
    Without any budget, one bar of the spend: known and unknown (worst case)."""
    uses = data.budget_uses()
    if not uses:
        if not data.calls:
            return None
        spend = [
            ("known spend", [data.known_usd], PALETTE[0]),
            ("unknown (worst case)", [data.unknown_usd], PALETTE[2]),
        ]
        return _stacked(["spend"], spend)
    labels = [_budget_label(use, data) for use in uses]
    against = [
        ("spent (known + unknown)", [use.spent_usd for use in uses], PALETTE[0]),
        ("budget left", [use.left_usd for use in uses], "#dde3ec"),
    ]
    return _stacked(labels, against)


def _budget_label(use: BudgetUse, data: DashboardData) -> str:
    scope = "run budget" if use.job is None else f"job {use.job}"
    label = scope if len(data.budgets) == 1 else f"{use.run}: {scope}"
    needed = budget_stop_needed(data.stopped, use.job)
    return label if needed is None else f"{label}: STOPPED, the next item needed up to {needed}"


# A budget's stop reason (costs/budget.py, ``Refusal.message``): its scope and what the next call needed.
_BUDGET_STOP = re.compile(r"\b(run|job (\S+)) budget\b.*? reached: .*?may cost up to ([0-9.]+) USD")


def budget_stop_needed(stopped: Sequence[str], job: str | None) -> str | None:
    """What the call a budget refused needed (its worst case), when that budget stopped work: the
    run's (``job`` None) or the job's; None when it stopped nothing."""
    for reason in stopped:
        for found in _BUDGET_STOP.finditer(reason):
            if (found.group(1) == "run" and job is None) or found.group(2) == job:
                return display_usd(Decimal(found.group(3)))
    return None


def _stacked(labels: list[str], parts: list[tuple[str, list[Decimal], str]]) -> go.Figure:
    traces = [
        go.Bar(
            x=[_float(usd) for usd in amounts],
            y=labels,
            orientation="h",
            name=name,
            marker={"color": colour},
            text=[display_usd(usd) for usd in amounts],
            hovertemplate=f"%{{y}}: {name} %{{text}}<extra></extra>",
        )
        for name, amounts, colour in parts
    ]
    layout = _layout(
        barmode="stack",
        height=max(200, 90 + 32 * len(labels)),
        xaxis={"title": "USD", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
    )
    return go.Figure(traces, layout)


def spend_by_day(totals: Mapping[tuple[str, str], Decimal], what: str) -> go.Figure | None:
    """USD per UTC day, one stacked bar per ``what`` (model, job): largest overall first, each
    bar's hover the exact amount; the legend lists every name whole."""
    if not totals:
        return None
    days = sorted({day for day, _ in totals})
    overall: dict[str, Decimal] = {}
    for (_, name), usd in totals.items():
        overall[name] = overall.get(name, Decimal(0)) + usd
    names = sorted(overall, key=lambda name: (-overall[name], name))
    traces = []
    for name in names:
        amounts = [totals.get((day, name), Decimal(0)) for day in days]
        traces.append(
            go.Bar(
                x=days,
                y=[_float(usd) for usd in amounts],
                name=name,
                text=[display_usd(usd) for usd in amounts],
                textposition="none",
                hovertemplate=f"%{{x}}<br>{escape(name)}: %{{text}}<extra></extra>",
            )
        )
    # The legend goes under the axis title, one row per few names (as many as fit a card's width at
    # the longest name), and the figure grows by its rows: a fixed margin let 12 job names run over
    # the axis title.
    per_row = max(1, LEGEND_WIDTH_PX // (LEGEND_MARK_PX + LEGEND_CHAR_PX * max(len(name) for name in names)))
    bottom = 75 + LEGEND_ROW_PX * math.ceil((len(names) + 1) / per_row)  # + 1: the legend's title
    plot = 200
    legend = {"orientation": "h", "x": 0, "y": -58 / plot, "yanchor": "top", "title": {"text": what}}
    return go.Figure(
        traces,
        _layout(
            barmode="stack",
            xaxis={"type": "category", "title": "day (UTC)"},
            yaxis={"title": "USD", "rangemode": "tozero"},
            legend=legend,
            margin={"l": 60, "r": 20, "t": 30, "b": bottom},
            height=30 + plot + bottom,
        ),
    )


def charts(data: DashboardData) -> list[tuple[str, str, go.Figure | None]]:
    """(name, title, figure or None when there is nothing to draw yet), in page order."""
    return [
        ("spend-over-time", "Spend over time (cumulative)", spend_over_time(data)),
        ("tokens-over-time", "Tokens over time (cumulative)", tokens_over_time(data)),
        ("spend-by-model", "Spend by model", ranked_bars(data.ranked(data.by_model), "spend")),
        ("spend-by-job", "Spend by job", ranked_bars(data.ranked(data.job_spend()), "spend")),
        ("spend-by-day-model", "Spend per day by model (UTC)", spend_by_day(data.by_day_model, "model")),
        ("spend-by-day-job", "Spend per day by job (UTC)", spend_by_day(data.by_day_job, "job")),
        ("latency", "Latency percentiles per kind (p50, p90, p99)", latency_percentiles(data)),
        ("errors", "Errors by type over time", errors_over_time(data)),
        ("limiter", "Rate limit and 429s over time", limiter_over_time(data)),
        ("throughput", "Items finished over time", throughput(data)),
        ("run-state", "Items per state", run_state(data)),
        ("budget", "Budget use", budget_use(data)),
    ]


def _cards(data: DashboardData) -> list[tuple[str, str, str]]:
    states = ", ".join(f"{state} {count}" for state, count in data.states.most_common()) or "-"
    return [
        ("Total spend", display_usd(data.total_usd), "known + unknown: what the budget counts"),
        ("Known spend", display_usd(data.known_usd), f"{data.calls} billable calls"),
        ("Unknown", display_usd(data.unknown_usd), "worst case of calls of unknown price or outcome"),
        ("Budget", *_budget_card(data)),
        ("Calls with unknown price", str(data.unpriced_calls), "counted at their known part"),
        ("Errors", str(sum(data.error_totals.values())), "retried or final"),
        ("Items", str(sum(data.states.values())), states),
        ("Stopped", "yes" if data.stopped else "no", "; ".join(data.stopped)),
    ]


def _budget_card(data: DashboardData) -> tuple[str, str]:
    budget = data.budget_usd
    if budget is not None:
        share = 100 * data.total_usd / budget if budget else Decimal(100)
        return display_usd(budget), f"{share:.1f}% used"
    if not data.budgets:
        return "not shown", "budgets count the whole run: shown without --since"
    if any(use.job is None for use in data.budget_uses()):
        return "per run", "not every run shown has one: see the budgets table"
    return "none set", "on the run" + (" (jobs: see the budgets table)" if data.budget_uses() else "")


def _budget_table(data: DashboardData) -> str:
    """Every budget beside its spend: the run's once (never the sum of its shards' shares), each job's."""
    uses = data.budget_uses()
    if not uses:
        return ""
    header = "".join(f"<th>{name}</th>" for name in ("budget", "spent", "of", "left", "used"))
    rows = "".join(
        f'<tr data-budget="{escape(use.run)}:{escape(use.scope)}"><td>{escape(_budget_label(use, data))}</td>'
        f"<td>{display_usd(use.spent_usd)}</td><td>{display_usd(use.budget_usd)}</td>"
        f"<td>{display_usd(use.left_usd)}</td><td>{use.percent_used:.1f}%</td></tr>"
        for use in uses
    )
    return (
        '<section class="budgets"><h2>Budgets</h2><table data-budgets>'
        f"<thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"
        "<small>spent = known + unknown (worst case): what the budget counts</small></section>"
    )


def _answers_table(data: DashboardData) -> str:
    """The label summary, as `relaybatch report --answers` prints it: per run, job and answer column."""
    if not data.answers:
        return ""
    names = ("run", "job", "answer", "answered", "mean", f"below {UNSURE_BELOW:g}", "answers")
    header = "".join(f"<th>{name}</th>" for name in names)
    rows = []
    for run, summary in data.answers:
        mean = "-" if summary.mean is None else f"{summary.mean:.3f}"
        below = "-" if summary.share_below is None else f"{summary.share_below:.1%}"
        spread = ", ".join(
            f"{value} {share:.1%} ({count:,})" for value, count, share in summary.distribution()
        )
        cells = (
            run,
            summary.job,
            summary.column.removeprefix("answer_"),
            f"{summary.answered:,}",
            mean,
            below,
        )
        rows.append(
            f'<tr data-answer="{escape(run)}:{escape(summary.column)}">'
            + "".join(f"<td>{escape(cell)}</td>" for cell in (*cells, spread or "-"))
            + "</tr>"
        )
    return (
        '<section class="answers"><h2>Answers</h2><table data-answers>'
        f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<small>from each run's exported results; for confidence columns, the share below the "
        "threshold</small>"
        "</section>"
    )


def _stuck_table(data: DashboardData) -> str:
    """Renders past their render deadline: named, with age and last status (engine/poll_plan.py)."""
    if not data.stuck:
        return ""
    header = "".join(f"<th>{name}</th>" for name in ("run", "job", "item", "age", "last status", "why"))
    rows = "".join(
        f'<tr data-stuck="{escape(stuck.run)}:{escape(stuck.item)}">'
        + "".join(
            f"<td>{escape(cell)}</td>"
            for cell in (
                stuck.run,
                stuck.job,
                stuck.item,
                f"{stuck.age_seconds / 60:.0f} min",
                stuck.last_status,
                stuck.reason,
            )
        )
        + "</tr>"
        for stuck in data.stuck
    )
    return (
        '<section class="stuck"><h2>Stuck renders</h2><table data-stuck-renders>'
        f"<thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"
        "<small>past their render deadline: a resume polls them again; `relaybatch cancel RUN "
        "--all-open` cancels them</small></section>"
    )


def _section(name: str, title: str, figure: go.Figure | None) -> str:
    body = (
        f'<div class="empty" data-chart="{name}" data-empty="true">No data yet</div>'
        if figure is None
        else f'<div class="chart" data-chart="{name}" role="img" aria-label="{escape(title)}"'
        f"{_height_style(figure)}></div>"
    )
    return f"<section><h2>{escape(title)}</h2>{body}</section>"


def _height_style(figure: go.Figure) -> str:
    """A figure that sets its own height (one bar a name, a legend of many names) gets a box of that
    height: in the page's fixed 320 px box it spilled over the card below."""
    height = figure.layout.height
    return "" if height is None else f' style="height: {int(height)}px"'


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value).replace("</", "<\\/")


def render_dashboard(data: DashboardData, title: str, library: str | None = None) -> str:
    """The page; ``library``: a relative path to plotly.js beside it (shared by the pages of a
    folder), else plotly.js inline."""
    drawn = charts(data)
    figures = {name: json.loads(plotly.io.to_json(figure)) for name, _, figure in drawn if figure is not None}
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    cards = "".join(
        f'<div class="card">{escape(name)}<b>{escape(value)}</b><small>{escape(note)}</small></div>'
        for name, value, note in _cards(data)
    )
    return "".join(
        [
            '<!doctype html><html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title><style>{STYLE}</style>",
            # plotly.js from the installed plotly package, inline or one shared file beside the
            # pages: either way the page needs no network.
            f'<script src="{escape(library)}"></script></head><body>'
            if library
            else f"<script>{get_plotlyjs()}</script></head><body>",
            f"<h1>{escape(title)}</h1>",
            f'<div class="meta">Runs: {escape(", ".join(data.runs) or "none")} · generated {generated} · '
            "amounts rounded for display; the ledger keeps full precision</div>",
            f'<div class="cards">{cards}</div>{_budget_table(data)}{_stuck_table(data)}',
            f'{_answers_table(data)}<div class="grid">',
            *(_section(name, chart_title, figure) for name, chart_title, figure in drawn),
            "</div>",
            f"<script>window.RELAYBATCH_CHARTS = {_script_json(figures)};{DRAW_SCRIPT}</script>",
            "</body></html>",
        ]
    )


def write_dashboard(data: DashboardData, path: Path, title: str, library_dir: Path | None = None) -> Path:
    """The page at ``path``; with ``library_dir`` (a folder holding ``path``), plotly.js is one
    file there shared by every page below it (``shared_library``), instead of 4.8 MB per page."""
    if library_dir is None:
        return write_text_atomically(path, render_dashboard(data, title))
    library = shared_library(library_dir)
    relative = os.path.relpath(library, path.parent).replace(os.sep, "/")
    return write_text_atomically(path, render_dashboard(data, title, relative))


def shared_library(folder: Path) -> Path:
    """``plotly-<version>.min.js`` in ``folder``, written once (again only when missing or not
    whole): the charting library the dashboards below ``folder`` load from disk."""
    import plotly

    path = folder / f"plotly-{plotly.__version__}.min.js"
    text = get_plotlyjs()
    if not path.is_file() or path.stat().st_size != len(text.encode("utf-8")):
        write_text_atomically(path, text)
    return path
