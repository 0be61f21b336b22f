"""Running a manifest: `relaybatch run` (in this process, or as a flow run on a Prefect server),
`relaybatch partition` (split it into input ranges) and `relaybatch submit` (as partition flow runs)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from relaybatch.cli._app import (
    BaseUrlOption,
    ManifestArgument,
    PartitionOption,
    RunsDirOption,
    ShardOption,
    SharedLimitOption,
    app,
    catalog_check,
    console,
    prefect_server_url,
    quiet_prefect,
    reports_user_errors,
)
from relaybatch.errors import UserError

if TYPE_CHECKING:
    from relaybatch.run import PlannedRun, RunOutcome, Shard
    from relaybatch.settings import Settings


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


RunNameOption = Annotated[
    str | None,
    typer.Option(
        "--run-name",
        help="Run name [default: run.name in the manifest, else its file name without extension].",
    ),
]
BudgetOption = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="USD this run may spend, e.g. 5.00 [default: run.budget_usd in the manifest].",
        callback=_budget_option,
    ),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--concurrency", min=1, max=1024, help="Calls in flight [default: run.concurrency, else 16]."
    ),
]
RateLimitOption = Annotated[
    int | None,
    typer.Option(
        "--rate-limit-rpm",
        min=1,
        help="A known requests-per-minute limit for this process's limiter, still corrected by the "
        "gateway's headers and 429s [default: run.rate_limit_rpm, else learnt from the gateway].",
    ),
]
RetryFailedOption = Annotated[
    bool,
    typer.Option(
        "--retry-failed",
        help="Put failed items back to pending before sending (after you fixed their cause): all "
        "of them, or those whose reason contains one of the REASON texts; never uncertain items.",
    ),
]
ReasonsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[REASON]...",
        help="With --retry-failed: retry only failures whose reason contains one of these texts "
        "(case-insensitive), e.g. 403.",
        show_default=False,
    ),
]


@app.command()
@reports_user_errors
def run(
    manifest: ManifestArgument,
    runs_dir: RunsDirOption = None,
    base_url: BaseUrlOption = None,
    shard: ShardOption = None,
    partition: PartitionOption = None,
    shared_limit_rpm: SharedLimitOption = None,
    run_name: RunNameOption = None,
    budget: BudgetOption = None,
    concurrency: ConcurrencyOption = None,
    rate_limit_rpm: RateLimitOption = None,
    retry_failed: RetryFailedOption = False,
    reasons: ReasonsArgument = None,
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
    with _stopped_cleanly_outside_the_engine():
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


@contextlib.contextmanager
def _stopped_cleanly_outside_the_engine() -> Iterator[None]:
    """SIGTERM taken as a Ctrl-C while the block runs, and a Ctrl-C reported as a clean stop (exit
    130, with the command that resumes).

    Outside the engine's execute step (which stops cleanly on its own, relaybatch/run/stopping.py)
    SIGTERM is a Ctrl-C: nothing is in flight then, and the stop is reported the same way. The
    imports in the block take a while too: a Ctrl-C during them is reported like one during planning.
    """
    import signal

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
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
    """Plan, execute and export the run (or one shard or partition of it), in this process or as a
    flow run on the configured Prefect server, then say how it went (raising the exit code)."""
    from relaybatch.run import Shard
    from relaybatch.settings import entry_settings

    part = Shard.parse(shard) if shard is not None else None
    settings = entry_settings(base_url=base_url, runs_dir=runs_dir)  # bad RELAYBATCH_* fail first
    server = _server_for(shared_limit_rpm)
    outcome: RunOutcome
    # This process holds the store's lock from planning to export (relaybatch/run/locking.py):
    # a second execution of the same store, or a merge into this run, is refused meanwhile.
    with contextlib.ExitStack() as hold:
        planned = _plan(manifest, settings, part, partition, overrides, retry, hold)
        if server is None:
            import asyncio

            from relaybatch.run import run_locally

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
    _say_outcome(planned, outcome)


def _server_for(shared_limit_rpm: int | None) -> str | None:
    """The configured Prefect server's API URL (None: run in this process), once a shared limit,
    given or from the environment, is known to be valid and to have the server it needs."""
    from relaybatch.prefect_server import configured_api_url
    from relaybatch.shared_limit import SharedLimit, SharedLimitSettings

    server = configured_api_url()
    rpm = shared_limit_rpm if shared_limit_rpm is not None else SharedLimitSettings().rpm
    if rpm is not None:
        SharedLimit(rpm=rpm)  # sizes checked before anything is sent
        if server is None:
            raise UserError(
                "a shared limit needs a Prefect server: set PREFECT_API_URL "
                "(e.g. http://127.0.0.1:4200/api after `prefect server start`), or drop the shared limit"
            )
    return server


def _plan(
    manifest: Path,
    settings: Settings,
    part: Shard | None,
    partition: str | None,
    overrides: Any,
    retry: tuple[str, ...] | None,
    hold: contextlib.ExitStack,
) -> PlannedRun:
    """The manifest planned into its run's store (a shard's or a partition's share), the store's
    lock taken into ``hold``; what the plan spared or reused said, and failed items put back to
    pending when ``retry`` asks (after the plan, under its lock: nothing runs in between)."""
    import functools

    from relaybatch.run import plan_run

    # Planned first: the manifest is opened once, bad input fails fast and cleanly, and
    # nothing is written unless every row is valid.
    check = functools.partial(catalog_check, settings=settings)
    if partition is not None:
        from relaybatch.run.partitions import Partition, plan_partition

        index, count = Partition.parse(partition)
        planned: PlannedRun = plan_partition(
            manifest, settings.runs_dir, index, count, overrides, check=check, hold=hold
        )
    else:
        planned = plan_run(manifest, settings.runs_dir, part, overrides, check=check, hold=hold, say=_say_run)
    if planned.planned != "whole":  # what the plan fingerprint spared (docs/manifests.md)
        typer.echo(f"relaybatch run: {_PLANNED_NOTES[planned.planned]}", err=True)
    for line in planned.reused.lines() if planned.reused else []:
        typer.echo(f"relaybatch run: {line}", err=True)
    if retry is not None:
        from relaybatch.run.retry import retry_failed

        for line in retry_failed(planned.paths, retry).lines():
            typer.echo(f"relaybatch run: {line}", err=True)
    return planned


def _say_outcome(planned: PlannedRun, outcome: RunOutcome) -> None:
    """The run's folder, counts and files; exit 130 after a signal, 1 when the run is resumable
    (stopped early, or not every item done), else nothing raised (exit 0)."""
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
    quiet_prefect()  # before anything imports Prefect: it reads its logging settings on import
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
    check = functools.partial(catalog_check, base_url=base_url)
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
    quiet_prefect()
    import asyncio
    import functools

    from relaybatch.flows.partitions import follow, submit_partitions
    from relaybatch.manifests import open_manifest
    from relaybatch.run import merge_shard_results, run_paths
    from relaybatch.run.partitions import prepare

    url = prefect_server_url()
    name = open_manifest(manifest).run_name
    run = run_paths(runs_dir, name)
    check = functools.partial(catalog_check, base_url=base_url)
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


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _resume_command() -> str:
    """The command line this process was started with: running it again resumes the run."""
    import shlex
    import sys

    return shlex.join(["relaybatch", *sys.argv[1:]])
