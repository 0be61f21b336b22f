"""The `relaybatch` command line: thin commands over the library; user errors exit 1 in one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import StrEnum
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from relaybatch.console import output_console, table
from relaybatch.errors import UserError

if TYPE_CHECKING:
    from relaybatch.run_folder import RunPaths
    from relaybatch.settings import Settings

app = typer.Typer(
    help="Run batches of Model Relay Gateway calls from manifests, with checkpoints and exact costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help texts say "[default: ...]"; rich markup would read the brackets as tags and drop them.
    rich_markup_mode=None,
)
emulator_app = typer.Typer(help="The local gateway emulator.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(emulator_app, name="emulator")

console = output_console()

F = TypeVar("F", bound=Callable[..., Any])


def reports_user_errors(command: F) -> F:
    """Turn a UserError into its message on stderr and exit code 1, with no traceback."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UserError as error:
            # Plain text: a message quoting user data must not be read as rich markup or wrapped.
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _quiet_prefect() -> None:
    """Prefect settings for a command-line run, unless the user set them."""
    defaults = {
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # The ephemeral server logs "Error flushing N events" tracebacks when the process exits
        # with events in flight; the flow has completed by then, so they are noise for a user.
        "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    for name, value in defaults.items():
        os.environ.setdefault(name, value)


ManifestArgument = Annotated[
    Path,
    typer.Argument(help="Manifest: YAML, or a CSV/JSONL/Parquet table, or an OpenAI Batch API JSONL file."),
]
RunsDirOption = Annotated[
    Path | None,
    typer.Option("--runs-dir", help="Folder of run folders [default: data/runs or RELAYBATCH_RUNS_DIR]."),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="Gateway base URL [default: RELAYBATCH_BASE_URL, else the embedded emulator].",
    ),
]
RunArgument = Annotated[
    str,
    typer.Argument(
        help="Run name: the manifest's run.name, or its file name without extension when it sets "
        "none (--run-name, when the run was started with it).",
    ),
]
ShardOption = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="Run only shard I of N (e.g. 1/2) in <run>/shards/I-of-N; `relaybatch merge` joins them.",
    ),
]
PartitionOption = Annotated[
    str | None,
    typer.Option(
        "--partition",
        help="Run only partition I of N (e.g. 3/12) of the split `relaybatch partition` made: only its "
        "rows are read and planned, in <run>/shards/part-I-of-N.",
    ),
]
SharedLimitOption = Annotated[
    int | None,
    typer.Option(
        "--shared-limit-rpm",
        help="Requests per minute shared with every run on the same Prefect server "
        "[default: RELAYBATCH_SHARED_LIMIT_RPM; unset: this process's own limiter].",
    ),
]
DeploymentsOption = Annotated[
    Path | None,
    typer.Option("--config", help="Deployments file [default: configs/deployments.yaml]."),
]


def _budget_option(value: str | None) -> str | None:
    """--budget as an exact positive decimal (never a float)."""
    from decimal import Decimal, InvalidOperation

    if value is None:
        return None
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise typer.BadParameter(f"{value!r} is not an amount in USD, e.g. 5.00") from None
    if not amount.is_finite() or amount <= 0:
        raise typer.BadParameter(f"{value!r}: the budget must be a positive amount in USD")
    from relaybatch.manifests.limits import MAX_BUDGET_USD

    if amount > MAX_BUDGET_USD:
        raise typer.BadParameter(f"{value!r}: the budget must be at most {MAX_BUDGET_USD:,} USD")
    return value


def _existing_run(run_name: str, runs_dir: Path | None) -> RunPaths:
    from relaybatch.settings import run_paths

    return run_paths(runs_dir, run_name).require_existing()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _resume_command() -> str:
    """The command line this process was started with: running it again resumes the run."""
    import shlex
    import sys

    return shlex.join(["relaybatch", *sys.argv[1:]])


@app.command()
@reports_user_errors
def run(
    manifest: ManifestArgument,
    runs_dir: RunsDirOption = None,
    base_url: BaseUrlOption = None,
    shard: ShardOption = None,
    partition: PartitionOption = None,
    shared_limit_rpm: SharedLimitOption = None,
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run-name",
            help="Run name [default: run.name in the manifest, else its file name without extension].",
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help="USD this run may spend, e.g. 5.00 [default: run.budget_usd in the manifest].",
            callback=_budget_option,
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", min=1, max=1024, help="Calls in flight [default: run.concurrency, else 16]."
        ),
    ] = None,
    rate_limit_rpm: Annotated[
        int | None,
        typer.Option(
            "--rate-limit-rpm",
            min=1,
            help="A known requests-per-minute limit for this process's limiter, still corrected by the "
            "gateway's headers and 429s [default: run.rate_limit_rpm, else learnt from the gateway].",
        ),
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Put failed items back to pending before sending (after you fixed their cause): all "
            "of them, or those whose reason contains one of the REASON texts; never uncertain items.",
        ),
    ] = False,
    reasons: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[REASON]...",
            help="With --retry-failed: retry only failures whose reason contains one of these texts "
            "(case-insensitive), e.g. 403.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a manifest, or resume its run: done items are never sent again.

    With no Prefect server configured (PREFECT_API_URL unset) the run happens in this process
    without Prefect; with one, it is a run-manifest flow run on that server. Exit code 0 when every
    item of the manifest is done; 1 when the run stopped early or items failed, are uncertain or
    still open (run the same command again to resume); 2 for usage errors; 130 when Ctrl-C or
    SIGTERM stopped it cleanly (the command that resumes is printed). `--retry-failed [REASON...]`
    puts failed items back to pending first, saying how many and why.
    """
    if reasons and not retry_failed:
        raise typer.BadParameter(
            f"unexpected argument {reasons[0]!r}: REASON texts go with --retry-failed", param_hint="REASON"
        )
    # Something on the screen (or in the log) at once, before the engine's imports and the
    # manifest's validation and planning, which take seconds on a busy machine or a big manifest.
    typer.echo(f"relaybatch run: checking {manifest}", err=True)
    import signal

    # Outside the engine's execute step (which stops cleanly on its own, relaybatch/run/stopping.py)
    # SIGTERM is a Ctrl-C: nothing is in flight then, and the stop is reported the same way. The
    # imports below take a while too: a Ctrl-C during them is reported like one during planning.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        from decimal import Decimal

        from relaybatch.run import RunOverrides

        overrides = RunOverrides(
            run_name=run_name,
            budget_usd=Decimal(budget) if budget is not None else None,
            concurrency=concurrency,
            rate_limit_rpm=rate_limit_rpm,
        )
        retry = tuple(reasons or ()) if retry_failed else None
        if shard is not None and partition is not None:
            raise UserError("--shard and --partition split a run in two different ways: give one")
        _run(manifest, runs_dir, base_url, shard, shared_limit_rpm, overrides, retry, partition)
    except KeyboardInterrupt:
        typer.echo("stopped: nothing was in flight; the checkpoint holds every item's state", err=True)
        typer.echo(f"resume with: {_resume_command()}", err=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(
    manifest: Path,
    runs_dir: Path | None,
    base_url: str | None,
    shard: str | None,
    shared_limit_rpm: int | None,
    overrides: Any,
    retry: tuple[str, ...] | None = None,
    partition: str | None = None,
) -> None:
    import asyncio
    import contextlib
    import functools

    from relaybatch.prefect_server import configured_api_url
    from relaybatch.run import RunOutcome, Shard, plan_run, run_locally
    from relaybatch.settings import entry_settings
    from relaybatch.shared_limit import SharedLimit, SharedLimitSettings

    part = Shard.parse(shard) if shard is not None else None
    settings = entry_settings(base_url=base_url, runs_dir=runs_dir)  # bad RELAYBATCH_* fail first
    server = configured_api_url()
    rpm = shared_limit_rpm if shared_limit_rpm is not None else SharedLimitSettings().rpm
    if rpm is not None:
        SharedLimit(rpm=rpm)  # sizes checked before anything is sent
        if server is None:
            raise UserError(
                "a shared limit needs a Prefect server: set PREFECT_API_URL "
                "(e.g. http://127.0.0.1:4200/api after `prefect server start`), or drop the shared limit"
            )

    outcome: RunOutcome
    # This process holds the store's lock from planning to export (relaybatch/run/locking.py):
    # a second execution of the same store, or a merge into this run, is refused meanwhile.
    with contextlib.ExitStack() as hold:
        # Planned first: the manifest is opened once, bad input fails fast and cleanly, and
        # nothing is written unless every row is valid.
        check = functools.partial(_catalog_check, settings=settings)
        if partition is not None:
            from relaybatch.run.partitions import Partition, plan_partition

            index, count = Partition.parse(partition)
            planned = plan_partition(
                manifest, settings.runs_dir, index, count, overrides, check=check, hold=hold
            )
        else:
            planned = plan_run(
                manifest, settings.runs_dir, part, overrides, check=check, hold=hold, say=_say_run
            )
        if planned.planned != "whole":  # what the plan fingerprint spared (docs/manifests.md)
            typer.echo(f"relaybatch run: {_PLANNED_NOTES[planned.planned]}", err=True)
        for line in planned.reused.lines() if planned.reused else []:
            typer.echo(f"relaybatch run: {line}", err=True)
        if retry is not None:  # after the plan, under its lock: nothing runs in between
            from relaybatch.run.retry import retry_failed

            for line in retry_failed(planned.paths, retry).lines():
                typer.echo(f"relaybatch run: {line}", err=True)
        if server is None:
            # No server: the same steps without Prefect (no temporary server, no Prefect import).
            outcome = asyncio.run(run_locally(manifest, planned=planned, settings=settings))
        else:
            typer.echo(
                f"relaybatch run: manifest valid; reporting to the Prefect server at {server}", err=True
            )
            outcome = _run_as_flow_run(
                manifest,
                runs_dir=runs_dir,
                # The gateway as resolved, so the flow run's parameters show it even when it came
                # from RELAYBATCH_BASE_URL (None: the embedded emulator).
                base_url=settings.base_url,
                shard=shard,
                shared_limit_rpm=shared_limit_rpm,
                planned=planned,
                partition=partition,
            )
    counts = ", ".join(f"{state} {count}" for state, count in sorted(outcome.counts.items()))
    console.print(f"run folder: {outcome.run_dir}")
    changes = f"{planned.added} new"
    if planned.superseded or planned.restored:
        changes += f", {planned.superseded} superseded, {planned.restored} back from superseded"
    which = "" if outcome.execution is None else f" (execution {outcome.execution} of the run)"
    console.print(f"items: {counts} ({changes}); {outcome.sent} requests sent by this execution{which}")
    for path in outcome.results:
        console.print(f"results: {path}")
    from relaybatch.run_folder import RunPaths

    ledger = RunPaths(outcome.run_dir).ledger
    if ledger.exists():
        console.print(f"cost ledger: {ledger}")
    if outcome.interrupted:
        typer.echo(f"stopped by {outcome.interrupted}: {outcome.stopped}", err=True)
        typer.echo(f"resume with: {_resume_command()}", err=True)
        raise typer.Exit(130)
    unfinished = {state: n for state, n in outcome.counts.items() if state not in ("done", "superseded")}
    if outcome.stopped or unfinished:
        # The run is resumable: the same command picks up where it stopped.
        if outcome.stopped:
            typer.echo(f"stopped: {outcome.stopped}", err=True)
        else:
            from relaybatch.run.status import status_command

            left = ", ".join(f"{state} {count}" for state, count in sorted(unfinished.items()))
            status = status_command(planned.paths.run_root.parent, planned.run_name)
            typer.echo(f"not every item is done ({left}); `{status}` says why", err=True)
        typer.echo(f"resume with: {_resume_command()}", err=True)
        raise typer.Exit(1)


def _say_run(line: str) -> None:
    typer.echo(f"relaybatch run: {line}", err=True)


_PLANNED_NOTES = {
    "unchanged": "no input changed since the last plan; not validated or planned again",
    "appended": "rows were appended since the last plan; only those were validated and planned",
}


def _run_as_flow_run(manifest: Path, **parameters: Any) -> Any:
    """The run-manifest flow, reported to the configured Prefect server; its outcome also when the
    flow run ended Cancelled (a signal stopped it)."""
    _quiet_prefect()  # before anything imports Prefect: it reads its logging settings on import
    import asyncio

    from relaybatch.flows import RunOutcome, run_manifest

    async def flow_run() -> Any:
        state = await run_manifest(manifest, return_state=True, **parameters)
        result = await state.aresult(raise_on_failure=False)
        if isinstance(result, BaseException):
            raise result
        return result

    outcome = asyncio.run(flow_run())
    assert isinstance(outcome, RunOutcome)
    return outcome


class ProblemFormat(StrEnum):
    text = "text"
    json = "json"


@app.command()
@reports_user_errors
def partition(
    manifest: ManifestArgument,
    partitions: Annotated[int, typer.Option("--partitions", min=1, help="How many partitions.")],
    runs_dir: RunsDirOption = None,
    run_name: Annotated[
        str | None,
        typer.Option("--run-name", help="Run name [default: run.name in the manifest, else its file name]."),
    ] = None,
    base_url: BaseUrlOption = None,
) -> None:
    """Split a manifest's rows into N input ranges, once, for `relaybatch run --partition I/N` or
    `relaybatch submit`: the whole manifest is validated here, each partition then reads only its rows."""
    import functools

    from relaybatch.manifests import open_manifest
    from relaybatch.run import run_paths
    from relaybatch.run.partitions import prepare

    name = run_name if run_name is not None else open_manifest(manifest).run_name
    run = run_paths(runs_dir, name)
    check = functools.partial(_catalog_check, base_url=base_url)
    prepared = prepare(manifest, run, partitions, check=check)
    console.print(f"run {name}: {len(prepared.partitions)} partitions of {manifest}")
    for each in prepared.partitions:
        console.print(
            f"  relaybatch run {manifest} --partition {each}" + (f" --run-name {name}" if run_name else "")
        )


@app.command()
@reports_user_errors
def submit(
    manifest: ManifestArgument,
    partitions: Annotated[int, typer.Option("--partitions", min=1, help="How many partitions.")],
    deployment: Annotated[
        str,
        typer.Option("--deployment", help="The run-manifest deployment whose work pool runs them."),
    ] = "run-manifest/partition",
    runs_dir: RunsDirOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the partitions live until each ends, then merge the run.")
    ] = False,
    base_url: BaseUrlOption = None,
) -> None:
    """Run a manifest as N partition flow runs of a deployment: `prefect worker start --pool POOL`
    on any machine pulls them. Splits it first (as `relaybatch partition`); returns at once, or
    with --wait shows each partition's state and process until all have ended, then merges."""
    _quiet_prefect()
    import asyncio
    import functools

    from relaybatch.flows.partitions import follow, submit_partitions
    from relaybatch.manifests import open_manifest
    from relaybatch.run import merge_shard_results, run_paths
    from relaybatch.run.partitions import prepare

    url = _prefect_server_url()
    name = open_manifest(manifest).run_name
    run = run_paths(runs_dir, name)
    check = functools.partial(_catalog_check, base_url=base_url)
    prepare(manifest, run, partitions, check=check)
    submitted = asyncio.run(submit_partitions(deployment, manifest, runs_dir, partitions))
    console.print(f"run {name}: {partitions} partition flow runs of {deployment} submitted to {url}")
    if not wait:
        for partition, flow_run_id in submitted:
            console.print(f"  partition {partition}: flow run {flow_run_id}")
        console.print(f"follow with: relaybatch status {name}; then: relaybatch merge {name}")
        return
    runs = asyncio.run(follow(submitted, _show_partitions()))
    failed = [run for run in runs if run.state != "COMPLETED"]
    for path in merge_shard_results(run):
        console.print(f"results: {path}")
    if failed:
        listed = ", ".join(f"{each.partition} {each.state.lower()}" for each in failed)
        typer.echo(f"not every partition completed ({listed}); submit again to resume them", err=True)
        raise typer.Exit(1)


def _show_partitions() -> Callable[[list[Any]], None]:
    """Print a line whenever a partition's state or process changes (a live view that also reads
    well in a log)."""
    seen: dict[str, tuple[str, str]] = {}

    def show(runs: list[Any]) -> None:
        for each in runs:
            now = (each.state, each.pid)
            if seen.get(each.partition) != now:
                seen[each.partition] = now
                where = f", pid {each.pid}" if each.pid else ""
                console.print(f"partition {each.partition}: {each.state.lower()} ({each.name}{where})")
                console.file.flush()  # a log shows each change as it happens

    return show


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
        _catalog_check(validation, base_url)
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
            _catalog_check(validation, base_url)
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


def _catalog_check(validation: Any, base_url: str | None = None, settings: Settings | None = None) -> None:
    """Add model-family problems from the gateway's catalog; a note after a clean pass when it
    cannot be read. One try: a gateway that is down must not hold a check up through backoff."""
    if not validation.routes:  # no text item: nothing to check, and no client to import
        return
    import asyncio

    from relaybatch.connect import open_client
    from relaybatch.gateway import RetryPolicy
    from relaybatch.settings import entry_settings

    async def families() -> str | None:
        try:
            client = open_client(
                settings or entry_settings(base_url=base_url), retry=RetryPolicy(max_attempts=1)
            )
        except UserError as error:  # no API key for a real gateway
            return _unchecked(error)
        async with client:
            return await _check_families(validation, client)

    note = asyncio.run(families())
    if note and validation.ok:  # with problems, the error list is the answer, first and alone
        typer.echo(f"note: {note}", err=True)


async def _check_families(validation: Any, client: Any) -> str | None:
    """Add family mismatches from the gateway's catalog to `validation`; a note when it cannot be read."""
    from relaybatch.gateway.errors import GatewayError
    from relaybatch.manifests import check_routes

    try:
        await check_routes(validation, client)
    except (GatewayError, UserError) as error:
        return _unchecked(error)
    return None


def _unchecked(error: Exception) -> str:
    return f"could not read the gateway's model catalog ({error}); model families were not checked"


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
    import asyncio
    from decimal import Decimal

    from relaybatch.connect import open_client
    from relaybatch.costs.observed import observed_outputs
    from relaybatch.costs.periods import period_plan_lines
    from relaybatch.costs.plan import Plan, make_plan, output_notes
    from relaybatch.manifests import open_manifest
    from relaybatch.settings import entry_settings

    checked = open_manifest(manifest)
    validation = checked.validate()
    validation.raise_if_invalid()
    providers = {job.name: job.provider for job in checked.jobs if job.provider}

    async def priced() -> Plan:
        async with open_client(settings) as client:
            note = await _check_families(validation, client)
            if note:
                typer.echo(f"note: {note}", err=True)
            validation.raise_if_invalid()  # a model of another family on a native route
            return await make_plan(checked.iter_items(), client, providers, observed)

    settings = entry_settings(base_url=base_url, runs_dir=runs_dir)
    # Earlier runs' answers (every run under the runs folder) say how long this job's answers are.
    observed = observed_outputs(settings.runs_dir)
    result = asyncio.run(priced())
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
    for line in output_notes(result):
        console.print(f"output: {line}")
    from relaybatch.run.render_plan import render_plan_table

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


@app.command()
@reports_user_errors
def status(
    run_name: RunArgument,
    runs_dir: RunsDirOption = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="List every failed, uncertain, cancelled and superseded item.")
    ] = False,
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than",
            min=0,
            help="List remote work (videos, V1 tasks) open for longer than this many seconds.",
        ),
    ] = 300.0,
    execution: Annotated[
        int | None,
        typer.Option(
            "--execution",
            min=1,
            help="Show this execution's figures (its id, as `status` and `report` print it) "
            "[default: the last execution's].",
        ),
    ] = None,
) -> None:
    """Print a run's counts per state and job, how its last execution ended and what it did and
    spent (new, sent, done, failed, spent), every item that did not end done with its reason (the
    first 20 of each state), remote work open for longer than --older-than with its age, last
    status and last poll, and the command that resumes it."""
    from relaybatch.engine import CheckpointStore
    from relaybatch.run import run_paths
    from relaybatch.run.status import money_parts, partitions_table, status_view

    partitioned = run_paths(runs_dir, run_name)
    if not partitioned.checkpoint.exists() and (partitions := partitions_table(partitioned.root)):
        # Partitions running or run, not merged yet: each one's state, host and spend, and the sums.
        console.print(partitions, *money_parts(partitioned.root))
        console.print(f"merge them into one result set with: relaybatch merge {run_name}")
        return
    paths = _existing_run(run_name, runs_dir)
    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        console.print(status_view(store, run_name, show_all, older_than, execution))


@app.command()
@reports_user_errors
def cancel(
    run_name: RunArgument,
    items: Annotated[
        list[str] | None,
        typer.Argument(metavar="[ITEM]...", help="Item ids to cancel (as `status` lists them)."),
    ] = None,
    job: Annotated[
        str | None, typer.Option("--job", help="Only this job's items (all of its open ones without ITEM).")
    ] = None,
    all_open: Annotated[
        bool, typer.Option("--all-open", help="Every open remote render of the run (of --job's, with it).")
    ] = False,
    base_url: BaseUrlOption = None,
    runs_dir: RunsDirOption = None,
) -> None:
    """Cancel a run's remote renders still running at the gateway (DELETE) and record them cancelled.
    A render that finished meanwhile is kept (the next run downloads it); V1 tasks have no cancel route."""
    import asyncio

    from relaybatch.connect import open_client
    from relaybatch.engine import CheckpointStore
    from relaybatch.gateway import RetryPolicy
    from relaybatch.run.cancel import cancel_remote_work, chosen_items
    from relaybatch.run.locking import RUN_ADVICE, holding, what_runs_in
    from relaybatch.settings import entry_settings

    if not (items or job or all_open):
        raise UserError("name what to cancel: ITEM ids, --job NAME, or --all-open")
    paths = _existing_run(run_name, runs_dir)
    settings = entry_settings(base_url=base_url)

    async def cancel_them(store: CheckpointStore) -> list[str]:
        rows, left_out = chosen_items(store, items or [], job, all_open)
        async with open_client(settings, retry=RetryPolicy(max_attempts=1)) as client:
            report = await cancel_remote_work(store, client, rows)
        report.kept.update(left_out)
        return report.lines()

    with holding(paths.root, f"cancelling remote work of {what_runs_in(paths)}", RUN_ADVICE, momentary=True):
        store = CheckpointStore(paths.checkpoint)
        try:
            lines = asyncio.run(cancel_them(store))
        finally:
            store.close()
    for line in lines:
        console.print(line, markup=False)


@app.command()
@reports_user_errors
def resolve(
    run_name: RunArgument,
    call: Annotated[
        str | None, typer.Argument(metavar="CALL", help="The call's id, as listed (omit to list).")
    ] = None,
    charged: Annotated[
        str | None, typer.Option("--charged", help="The gateway's bill shows this charge (USD).")
    ] = None,
    not_charged: Annotated[
        bool, typer.Option("--not-charged", help="The gateway's bill shows no charge for it.")
    ] = False,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Only this store: `run` (the run's own) or a shard's as I/N, as listed "
            "[default: the run's and every shard's].",
        ),
    ] = None,
    runs_dir: RunsDirOption = None,
) -> None:
    """List calls sent with no answer recorded (counted at their worst case), in the run's store and
    its shards', or settle one from the gateway's bill in the store that has it."""
    import contextlib

    from relaybatch.costs.terminal import list_unknown, settle_unknown
    from relaybatch.run.locking import RESOLVE_ADVICE, holder_of, holding, what_runs_in
    from relaybatch.run_folder import RunPaths
    from relaybatch.settings import run_paths

    paths = run_paths(runs_dir, run_name)
    if not any(
        folder.checkpoint.exists() for folder in paths.shard_folders()
    ):  # shards alone need no merge first
        paths.require_existing()
    if call is None:
        # Listing only reads (read-only stores): it needs no lock and lists beside an execution.
        for folder in list_unknown(console, paths.root, store):
            holder = holder_of(folder)
            if holder is not None and not (holder.momentary or holder.merging):  # calls in flight
                console.print(
                    f"executing now: {holder.describe()}; calls it has in flight are listed too and "
                    "settle when they answer"
                )
        return

    def settling(folder: Path) -> contextlib.AbstractContextManager[None]:
        # An execution answers its calls in flight itself: settling one of them from a bill would
        # race its answer. One writer per store folder, a shard's too (run/locking.py).
        activity = f"settling a call of {what_runs_in(RunPaths(folder))}"
        return holding(folder, activity, RESOLVE_ADVICE, momentary=True)

    settle_unknown(console, paths.root, call, charged, not_charged, store, settling)


@app.command()
@reports_user_errors
def export(run_name: RunArgument, runs_dir: RunsDirOption = None) -> None:
    """Rebuild a run's results Parquet files (one per job) and its cost ledger from its stores.

    Every file is written again, also one edited in place. While the run executes (or merges) it
    writes a consistent snapshot under <run>/snapshot/ instead, the rows done so far with their
    answers, and the run goes on (it writes its own files when it ends)."""
    from relaybatch.run import RunBusy, rebuild_run_exports

    paths = _existing_run(run_name, runs_dir)
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


@app.command()
@reports_user_errors
def report(
    run_names: Annotated[
        list[str] | None, typer.Argument(metavar="RUN", help="Runs to report (default: every run).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only charges on or after this UTC day (YYYY-MM-DD); leaves budgets out."
        ),
    ] = None,
    runs_dir: RunsDirOption = None,
    dashboards_dir: Annotated[
        Path,
        typer.Option(
            "--dashboards-dir",
            help="Folder for the combined HTML dashboard (relaybatch-report.html; a report of some "
            "runs or --since gets a file of its own named after the filter).",
        ),
    ] = Path("dashboards"),
    answers: Annotated[
        bool,
        typer.Option(
            "--answers",
            help="Instead of spend: per job and answer column, the answers' distribution, mean "
            "confidence and the share below --threshold, from the exported results.",
        ),
    ] = False,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold", min=0.0, max=1.0, help="With --answers: a confidence below it is unsure."
        ),
    ] = 0.5,
    execution: Annotated[
        int | None,
        typer.Option(
            "--execution",
            min=1,
            help="With one RUN: show this execution's figures [default: each run's last execution].",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until", help="Only charges on or before this UTC day (YYYY-MM-DD); leaves budgets out."
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="One more table grouped by these columns, comma-separated: run, job, model, provider, "
            "kind, day (e.g. --by day,model).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write the --by table (every column without --by) as FILE.csv or FILE.parquet "
            "(exact decimals).",
        ),
    ] = None,
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


def _prefect_server_url() -> str:
    """Deployments and schedules need a real server; say how to get one instead of starting
    an ephemeral server that would vanish with this process."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise UserError(
            "no Prefect server: run `prefect server start` and set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (docs/prefect.md)"
        )
    return str(url)


@app.command()
@reports_user_errors
def deploy(
    config: DeploymentsOption = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="Work pool [default: work_pool in the file].")
    ] = None,
    silent_after: Annotated[
        float,
        typer.Option(
            "--silent-after",
            min=45,
            help="Seconds without a heartbeat before a relaybatch flow run is marked Crashed (then re-run).",
        ),
    ] = 90,
) -> None:
    """Register the scheduled deployments of configs/deployments.yaml on a work pool, and the two
    automations a self-hosted server lacks: a relaybatch flow run whose heartbeats stop is Crashed,
    and a crashed one is scheduled again for any worker of the pool."""
    _quiet_prefect()
    import asyncio

    from relaybatch.flows.deployments import load_deployments, register_deployments

    deployments = load_deployments(config)
    url = _prefect_server_url()
    names = asyncio.run(register_deployments(deployments, work_pool=pool))
    work_pool = pool or deployments.work_pool
    for name in names:
        console.print(f"deployed: {name} (work pool {work_pool})")
    from relaybatch.flows.automations import install_automations

    for name in asyncio.run(install_automations(silent_after)):
        console.print(f"automation: {name}")
    console.print(f"run them with: prefect worker start --pool {work_pool}   (server {url})")
    console.print("set PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30 for every worker: silent flow runs are re-run")


@app.command()
@reports_user_errors
def serve(config: DeploymentsOption = None) -> None:
    """Register the deployments of configs/deployments.yaml and run them from this process.

    One line per flow run started and finished; one Ctrl-C (or SIGTERM) stops, leaving the
    deployments' schedules as they were.
    """
    _quiet_prefect()
    import asyncio

    from relaybatch.flows.deployments import load_deployments, runner_deployments, serve_deployments

    specs = load_deployments(config)
    url = _prefect_server_url()

    async def serving() -> None:
        deployments = await runner_deployments(specs)
        console.print(f"serving {len(deployments)} deployments on {url}; Ctrl-C stops")
        await serve_deployments(deployments, say=console.print)

    asyncio.run(serving())
    console.print("stopped")


@emulator_app.command("serve")
@reports_user_errors
def emulator_serve(
    host: Annotated[
        str,
        typer.Option(help="Address to listen on; beyond loopback (e.g. 0.0.0.0) needs an admin token."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one (printed).")] = 8780,
    config: Annotated[
        Path | None,
        typer.Option(
            envvar="RELAYBATCH_EMULATOR_CONFIG",
            show_envvar=False,
            help="Emulator configuration file "
            "[default: RELAYBATCH_EMULATOR_CONFIG, else configs/emulator.yaml].",
        ),
    ] = None,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="RELAYBATCH_EMULATOR_ADMIN_TOKEN",
            show_envvar=False,
            help="Token the admin API (/_emulator/) requires as 'Authorization: Bearer TOKEN' "
            "[default: RELAYBATCH_EMULATOR_ADMIN_TOKEN; unset: open, loopback only]. "
            "Prefer the variable: a command-line token shows in the process list.",
        ),
    ] = None,
) -> None:
    """Serve the gateway emulator over HTTP until interrupted; prints its address, keys and admin API."""
    from relaybatch.emulator.config import DEFAULT_CONFIG_PATH, load_config
    from relaybatch.emulator.serving import serve

    config_path = config or DEFAULT_CONFIG_PATH
    serve(
        load_config(config_path),
        config_path,
        host=host,
        port=port,
        admin_token=admin_token,
        say=lambda line: typer.echo(line),
        warn=lambda line: typer.echo(line, err=True),
    )


def main() -> None:  # pragma: no cover - console entry for `python -m relaybatch`
    app(prog_name="relaybatch")


if __name__ == "__main__":  # pragma: no cover
    main()
