"""`relaybatch report RUN --answers`: the label summary of a run's results, as a table.

The summaries are relaybatch.structured.summary's, read from the run's exported results
(``results/<job>.parquet``; `relaybatch export RUN` writes them when a run has not).
"""

from __future__ import annotations

from rich.table import Table

from relaybatch.console import table
from relaybatch.errors import UserError
from relaybatch.run_folder import RunPaths
from relaybatch.structured.summary import AnswerSummary, summarize_results


def answers_table(paths: RunPaths, threshold: float) -> Table:
    """Per job and answer column: the answers' distribution, or their mean (and, for confidence,
    the share below ``threshold``); a UserError when the run has no exported results."""
    results = sorted(paths.results.glob("*.parquet")) if paths.results.is_dir() else []
    if not results:
        raise UserError(
            f"run '{paths.name}' has no results yet at {paths.results}: "
            f"run `relaybatch export {paths.name}` (or finish the run) first"
        )
    summaries = summarize_results(results, threshold)
    numbers = ("answered", "mean", f"below {threshold:g}")
    grid = table("job", "answer", *numbers, "answers", title=f"Answers of {paths.name}", whole=numbers)
    for summary in summaries:
        grid.add_row(summary.job, summary.column.removeprefix("answer_"), *_row(summary))
    return grid


def _row(summary: AnswerSummary) -> tuple[str, str, str, str]:
    answered = f"{summary.answered:,} / {summary.rows:,}"
    mean = "-" if summary.mean is None else f"{summary.mean:.3f}"
    below = "-" if summary.share_below is None else f"{summary.share_below:.1%} ({summary.below:,})"
    spread = ", ".join(f"{value} {share:.1%} ({count:,})" for value, count, share in summary.distribution())
    return answered, mean, below, spread or "-"
