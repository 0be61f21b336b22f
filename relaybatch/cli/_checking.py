"""Checking a manifest before anything is sent: `relaybatch validate` (every problem, located) and
`relaybatch plan` (its items and their estimated cost)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from relaybatch.cli._app import (
    BaseUrlOption,
    ManifestArgument,
    RunsDirOption,
    app,
    catalog_check,
    check_families,
    console,
    reports_user_errors,
)
from relaybatch.console import table
from relaybatch.errors import UserError

if TYPE_CHECKING:
    from relaybatch.costs.plan import Plan
    from relaybatch.manifests import Manifest, Validation
    from relaybatch.settings import Settings


class ProblemFormat(StrEnum):
    text = "text"
    json = "json"


@app.command()
@reports_user_errors
def validate(
    manifest: ManifestArgument,
    base_url: BaseUrlOption = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline", help="Do not read the gateway's model catalog (model families go unchecked)."
        ),
    ] = False,
    output_format: Annotated[
        ProblemFormat,
        typer.Option(
            "--format",
            help="text: the problems (stderr) or a short plan, for a person; json: one JSON object per "
            "problem on stdout (file, line, field, message, hint, rows, more_rows), nothing when valid.",
        ),
    ] = ProblemFormat.text,
) -> None:
    """Check a manifest without sending anything billed; list every problem with its location."""
    from relaybatch.manifests import open_manifest

    if output_format == ProblemFormat.json:
        _validate_as_json(manifest, base_url, offline)
        return
    checked = open_manifest(manifest)
    validation = checked.validate()
    if not offline:
        catalog_check(validation, base_url)
    validation.raise_if_invalid()
    counts = table("job", "kind", "model", "items", whole=("items",))
    for (job, kind, model), count in sorted(validation.counts.items()):
        counts.add_row(job, kind, model, str(count))
    console.print(f"{manifest}: valid, {validation.total} items in {len(checked.jobs)} jobs")
    console.print(counts)


def _validate_as_json(manifest: Path, base_url: str | None, offline: bool) -> None:
    """`validate --format json`: each problem as one JSON line on stdout, exit 1; nothing, exit 0."""
    import json

    from relaybatch.manifests import ManifestInvalid, Problem, open_manifest

    try:
        validation = open_manifest(manifest).validate()
        if not offline:
            catalog_check(validation, base_url)
        validation.raise_if_invalid()
    except ManifestInvalid as invalid:
        problems = invalid.problems
    except UserError as error:  # not a manifest at all: one line naming the file
        problems = [Problem(str(manifest), None, None, str(error).removeprefix(f"{manifest}: "))]
    else:
        return
    for problem in problems:
        typer.echo(json.dumps(problem.as_json(), ensure_ascii=False))
    raise typer.Exit(1)


@app.command()
@reports_user_errors
def plan(
    manifest: ManifestArgument,
    base_url: BaseUrlOption = None,
    show_items: Annotated[int, typer.Option("--items", min=0, help="Also list the first N items.")] = 0,
    runs_dir: RunsDirOption = None,
) -> None:
    """Show the items of a manifest and an estimated cost per job, sending no billed request; a text
    job's output length is learnt from earlier runs' answers (under the runs folder) when any; for
    video jobs, the poll plan (expected render, poll cadence, wall time) at the run's limit."""
    from relaybatch.costs.plan import output_notes
    from relaybatch.manifests import open_manifest
    from relaybatch.run.render_plan import render_plan_table
    from relaybatch.settings import entry_settings

    checked = open_manifest(manifest)
    validation = checked.validate()
    validation.raise_if_invalid()
    settings = entry_settings(base_url=base_url, runs_dir=runs_dir)
    result = _priced(checked, validation, settings)
    _show_estimates(checked, result)
    for line in output_notes(result):
        console.print(f"output: {line}")
    renders, how = render_plan_table(checked)
    if renders is not None:
        console.print(renders)
        console.print(how)
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if show_items:
        listing = table("item id", "job", "kind", "key", "source")
        for _, item in zip(range(show_items), checked.iter_items(), strict=False):
            listing.add_row(item.item_id, item.job, item.kind, item.key, item.source)
        console.print(listing)
    if not result.complete:
        unpriced = ", ".join(f"{job.job} ({job.unpriced} items)" for job in result.jobs if not job.priced)
        typer.echo(f"error: could not price every item: {unpriced}; the totals leave them out", err=True)
        raise typer.Exit(1)


def _priced(checked: Manifest, validation: Validation, settings: Settings) -> Plan:
    """The manifest's items priced against the gateway's catalog (its model families checked first);
    a text job's output length from earlier runs' answers under the runs folder, when any."""
    import asyncio

    from relaybatch.connect import open_client
    from relaybatch.costs.observed import observed_outputs
    from relaybatch.costs.plan import make_plan

    providers = {job.name: job.provider for job in checked.jobs if job.provider}

    async def priced() -> Plan:
        async with open_client(settings) as client:
            note = await check_families(validation, client)
            if note:
                typer.echo(f"note: {note}", err=True)
            validation.raise_if_invalid()  # a model of another family on a native route
            return await make_plan(checked.iter_items(), client, providers, observed)

    # Earlier runs' answers (every run under the runs folder) say how long this job's answers are.
    observed = observed_outputs(settings.runs_dir)
    return asyncio.run(priced())


def _show_estimates(checked: Manifest, result: Plan) -> None:
    """The plan's table (a row per job), its totals, and each budget against its worst case."""
    from decimal import Decimal

    from relaybatch.costs.periods import period_plan_lines

    numbers = ("items", "in tokens", "out tokens", "video s", "expected USD", "worst case USD")
    estimates = table("job", "kind", "model", *numbers, "not estimated", whole=numbers)
    for job in result.jobs:
        expected = f"{job.expected_usd:.6f}" if job.priced else "?"
        worst = f"{job.worst_usd:.6f}" if job.priced else "?"
        row = (job.items, job.input_tokens, job.output_tokens, job.video_seconds)
        unknown = "; ".join(sorted(job.unknowns)) or "-"
        estimates.add_row(job.job, job.kind, job.model or "-", *map(str, row), expected, worst, unknown)
    console.print(estimates)
    console.print(
        f"expected total: {result.expected_usd:.6f} USD; worst case: {result.worst_usd:.6f} USD "
        "(what a budget reserves; the gateway never bills more)"
    )
    if checked.settings.budget_usd is not None:
        verdict = "covers" if result.worst_usd <= checked.settings.budget_usd else "is BELOW"
        console.print(f"run budget: {checked.settings.budget_usd} USD, which {verdict} the worst case")
    periods = checked.settings.period_budgets()
    for line in period_plan_lines(periods, checked.settings.budget_timezone, result.worst_usd):
        console.print(line)
    for spec in checked.jobs:
        if spec.budget_usd is not None:
            job_worst = sum((job.worst_usd for job in result.jobs if job.job == spec.name), Decimal(0))
            verdict = "covers" if job_worst <= spec.budget_usd else "is BELOW"
            console.print(f"job {spec.name} budget: {spec.budget_usd} USD, which {verdict} its worst case")
