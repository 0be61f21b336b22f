"""A run's files: `relaybatch export` (results and ledger written again, or a snapshot beside an
execution), `relaybatch report` (spend, budgets, dashboards, answers) and `relaybatch merge`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from relaybatch.cli._app import RunArgument, RunsDirOption, app, console, existing_run, reports_user_errors
from relaybatch.errors import UserError


@app.command()
@reports_user_errors
def export(run_name: RunArgument, runs_dir: RunsDirOption = None) -> None:
    """Rebuild a run's results Parquet files (one per job) and its cost ledger from its stores.

    Every file is written again, also one edited in place. While the run executes (or merges) it
    writes a consistent snapshot under <run>/snapshot/ instead, the rows done so far with their
    answers, and the run goes on (it writes its own files when it ends)."""
    from relaybatch.run import RunBusy, rebuild_run_exports

    paths = existing_run(run_name, runs_dir)
    try:
        results = rebuild_run_exports(paths)  # holds the run's lock (run/locking.py)
        ledger = paths.ledger if paths.ledger.exists() else None
    except RunBusy:
        from relaybatch.run import holder_of
        from relaybatch.run.snapshot import export_snapshot

        holder = holder_of(paths.root)
        who = holder.describe() if holder else "another process"
        typer.echo(f"note: {who}; exporting a snapshot beside it to {paths.snapshot.root}", err=True)
        # The execution comes first: on a busy machine this process takes only the CPU it leaves
        # (benchmarks/RESULTS.md, issue 31: the run's items/s beside an export).
        os.nice(10)
        snapshot = export_snapshot(paths)
        console.print(snapshot.line())
        results, ledger = snapshot.results, snapshot.ledger
    for path in results:
        console.print(f"results: {path}")
    if ledger is not None:
        console.print(f"cost ledger: {ledger}")


ReportRunNamesArgument = Annotated[
    list[str] | None, typer.Argument(metavar="RUN", help="Runs to report (default: every run).")
]
ReportSinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Only charges on or after this UTC day (YYYY-MM-DD); leaves budgets out."),
]
ReportDashboardsDirOption = Annotated[
    Path,
    typer.Option(
        "--dashboards-dir",
        help="Folder for the combined HTML dashboard (relaybatch-report.html; a report of some "
        "runs or --since gets a file of its own named after the filter).",
    ),
]
ReportAnswersOption = Annotated[
    bool,
    typer.Option(
        "--answers",
        help="Instead of spend: per job and answer column, the answers' distribution, mean "
        "confidence and the share below --threshold, from the exported results.",
    ),
]
ReportThresholdOption = Annotated[
    float,
    typer.Option("--threshold", min=0.0, max=1.0, help="With --answers: a confidence below it is unsure."),
]
ReportExecutionOption = Annotated[
    int | None,
    typer.Option(
        "--execution",
        min=1,
        help="With one RUN: show this execution's figures [default: each run's last execution].",
    ),
]
ReportUntilOption = Annotated[
    str | None,
    typer.Option("--until", help="Only charges on or before this UTC day (YYYY-MM-DD); leaves budgets out."),
]
ReportByOption = Annotated[
    str | None,
    typer.Option(
        "--by",
        help="One more table grouped by these columns, comma-separated: run, job, model, provider, "
        "kind, day (e.g. --by day,model).",
    ),
]
ReportOutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        help="Write the --by table (every column without --by) as FILE.csv or FILE.parquet (exact decimals).",
    ),
]


@app.command()
@reports_user_errors
def report(
    run_names: ReportRunNamesArgument = None,
    since: ReportSinceOption = None,
    runs_dir: RunsDirOption = None,
    dashboards_dir: ReportDashboardsDirOption = Path("dashboards"),
    answers: ReportAnswersOption = False,
    threshold: ReportThresholdOption = 0.5,
    execution: ReportExecutionOption = None,
    until: ReportUntilOption = None,
    by: ReportByOption = None,
    output: ReportOutputOption = None,
) -> None:
    """Spend by job, model, kind and day, each budget beside its spend, each run's last execution
    (new, sent, done, failed, spent), and an HTML dashboard (each run's own dashboard is written
    only by an unfiltered report; a filtered one writes its own file); with --answers, the label
    summary of each run's results instead."""
    from relaybatch.costs.terminal import run_report
    from relaybatch.run.executions import execution_lines
    from relaybatch.run.locking import refreshing_ledger
    from relaybatch.settings import entry_settings

    settings = entry_settings(runs_dir=runs_dir)
    if execution is not None and len(run_names or []) != 1:
        raise UserError("--execution ID: name exactly one RUN (an execution's id is its run's)")
    if answers:
        from relaybatch.costs.report import run_folders
        from relaybatch.run.answers import answers_table
        from relaybatch.run_folder import RunPaths

        for folder in run_folders(settings.runs_dir, run_names or []):
            console.print(answers_table(RunPaths.for_run(settings.runs_dir, folder.name), threshold))
        return
    # Each store's ledger is rewritten under its lock; beside an execution it is left to it.
    from relaybatch.costs.grouping import parse_by

    grouping = parse_by(by)
    run_report(
        console,
        settings.runs_dir,
        run_names or [],
        since,
        dashboards_dir,
        refreshing_ledger,
        grouping,
        output,
        until,
    )
    for line in execution_lines(settings.runs_dir, run_names or [], execution):
        console.print(line)


@app.command()
@reports_user_errors
def merge(
    run_name: RunArgument,
    runs_dir: RunsDirOption = None,
    shards: Annotated[
        int | None,
        typer.Option("--shards", help="Only the shards of this split [default: every shard on disk]."),
    ] = None,
) -> None:
    """Fold a run's shard stores into the run's own store and export its results from there."""
    from relaybatch.run import merge_shard_results
    from relaybatch.settings import run_paths

    paths = run_paths(runs_dir, run_name)
    for path in merge_shard_results(paths, shards):
        console.print(f"results: {path}")
