"""The final summary of a run in the Prefect UI: items per state, timings, failures with their
reasons, spend, and where the outputs are.

Output locations are plain paths in code spans, not ``file://`` links: the UI runs in a browser,
usually on another machine, and a browser does not open local files from a web page.

Only aggregates go into artifacts (Prefect stores them; Cloud caps request bodies), never item
contents, request bodies or anything from the environment: no API key can reach them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from relaybatch.run import Failure, SpendLine, failures, items_per_job_and_state, total_spend
from relaybatch.run.executions import execution_usd as usd

FAILURE_REASONS_SHOWN = 20


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    text = "-".join(parts).lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text)).strip("-") or "run"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _duration(seconds: float) -> str:
    minutes, second = divmod(seconds, 60)
    return f"{int(minutes)}m{second:04.1f}s" if minutes else f"{second:.1f} s"


SPEND_HEADER = "| job | model | known USD | unknown USD (worst case) | total USD |\n|---|---|---|---|---|"


def summary_markdown(
    run_name: str,
    counts: dict[str, int],
    spend: list[SpendLine],
    outputs: list[Path],
    notes: list[str],
    timings: dict[str, float] | None = None,
    failed: list[Failure] | None = None,
) -> str:
    lines = [f"# Run `{run_name}`", "", "## Items", "", "| state | items |", "|---|---|"]
    lines += [f"| {state} | {count} |" for state, count in sorted(counts.items())]
    if timings:
        lines += ["", "## Timings", "", "| step | time |", "|---|---|"]
        lines += [f"| {step} | {_duration(seconds)} |" for step, seconds in timings.items()]
        lines += [f"| **total** | **{_duration(sum(timings.values()))}** |"]
    if failed:
        shown = failed[:FAILURE_REASONS_SHOWN]
        lines += ["", "## Failures", "", "| state | reason | items | e.g. item |", "|---|---|---|---|"]
        lines += [f"| {f.state} | {_cell(f.reason)} | {f.items} | `{_cell(f.example)}` |" for f in shown]
        if len(failed) > len(shown):
            lines += ["", f"{len(failed) - len(shown)} more reasons: `relaybatch status RUN`."]
        lines += ["", "A resume retries retryable failures; `relaybatch status RUN` lists uncertain items."]
    lines += ["", "## Spend (USD)", ""]
    if spend:
        lines += [SPEND_HEADER]
        lines += [
            f"| {x.job} | {x.model} | {usd(x.usd)} | {usd(x.unknown_usd)} | {usd(x.total_usd)} |"
            for x in spend
        ]
        known = sum((line.usd for line in spend), Decimal(0))
        total = total_spend(spend)
        lines += [f"| **total** | | **{usd(known)}** | **{usd(total - known)}** | **{usd(total)}** |"]
    else:
        lines += ["No charges recorded for this run."]
    lines += ["", "## Outputs", ""]
    lines += [f"- `{path.resolve()}`" for path in outputs] or ["- none"]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


async def publish_summary(
    run_name: str,
    checkpoints: list[Path],
    counts: dict[str, int],
    spend: list[SpendLine],
    outputs: list[Path],
    notes: list[str] | None = None,
    timings: dict[str, float] | None = None,
) -> None:
    """Markdown and table artifacts, keyed by run so the UI keeps each run's history."""
    key = artifact_key("relaybatch", run_name)
    await acreate_markdown_artifact(
        summary_markdown(run_name, counts, spend, outputs, notes or [], timings, failures(checkpoints)),
        key=f"{key}-summary",
        description=f"relaybatch run {run_name}: items, timings, failures, spend and outputs",
    )
    await acreate_table_artifact(
        items_per_job_and_state(checkpoints),
        key=f"{key}-items",
        description="items per job and state",
    )
    if spend:
        await acreate_table_artifact(
            [line.row() for line in spend],
            key=f"{key}-spend",
            description="spend by job and model, from the cost ledger (USD; unknown = worst case)",
        )
