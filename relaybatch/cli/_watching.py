"""Looking after a run: `relaybatch status` (counts, reasons, the last execution), `relaybatch
cancel` (remote renders) and `relaybatch resolve` (calls sent with no answer recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from relaybatch.cli._app import (
    BaseUrlOption,
    RunArgument,
    RunsDirOption,
    app,
    console,
    existing_run,
    reports_user_errors,
)
from relaybatch.errors import UserError


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
    from relaybatch.folder_lock import executed_elsewhere
    from relaybatch.run import run_paths
    from relaybatch.run.status import (
        executed_elsewhere_parts,
        partitions_money_line,
        partitions_table,
        status_view,
    )

    partitioned = run_paths(runs_dir, run_name)
    flow_runs = _partition_flow_runs(partitioned.root)
    if (holder := executed_elsewhere(partitioned.root)) is not None:
        # Another host executes (or merges) the run's own store: its files only (DESIGN.md 11).
        console.print(*executed_elsewhere_parts(partitioned.root, holder, flow_runs))
        return
    if not partitioned.checkpoint.exists() and (partitions := partitions_table(partitioned.root, flow_runs)):
        # Partitions running or run, not merged yet: each one's state, host and spend, and the sums,
        # from the files each partition's owner writes (never another host's SQLite).
        console.print(partitions, partitions_money_line(partitioned.root), markup=False)
        console.print(f"merge them into one result set with: relaybatch merge {run_name}")
        return
    paths = existing_run(run_name, runs_dir)
    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        console.print(status_view(store, run_name, show_all, older_than, execution, flow_runs))


def _partition_flow_runs(run_dir: Path) -> dict[str, str] | None:
    """With a Prefect server configured, the state and worker process of each partition's last
    flow run, by its name; None without a server, or when it does not answer (the rest of the
    status still shows)."""
    import asyncio

    from relaybatch.prefect_server import configured_api_url
    from relaybatch.run.status import partition_flow_run_names

    names = partition_flow_run_names(run_dir)
    if not names or configured_api_url() is None:
        return None
    from relaybatch.flows.partitions import flow_runs_named

    try:
        return asyncio.run(asyncio.wait_for(flow_runs_named(names), FLOW_RUNS_TIMEOUT_SECONDS))
    except Exception:  # the server away or restarting: the files still say what each partition did
        return None


# How long `status` waits for the Prefect server's flow runs before it shows the partitions without.
FLOW_RUNS_TIMEOUT_SECONDS = 10.0


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
    paths = existing_run(run_name, runs_dir)
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


ResolveCallArgument = Annotated[
    str | None, typer.Argument(metavar="CALL", help="The call's id, as listed (omit to list).")
]
ResolveChargedOption = Annotated[
    str | None, typer.Option("--charged", help="The gateway's bill shows this charge (USD).")
]
ResolveNotChargedOption = Annotated[
    bool, typer.Option("--not-charged", help="The gateway's bill shows no charge for it.")
]
ResolveStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Only this store: `run` (the run's own) or a shard's as I/N, as listed "
        "[default: the run's and every shard's].",
    ),
]


@app.command()
@reports_user_errors
def resolve(
    run_name: RunArgument,
    call: ResolveCallArgument = None,
    charged: ResolveChargedOption = None,
    not_charged: ResolveNotChargedOption = False,
    store: ResolveStoreOption = None,
    runs_dir: RunsDirOption = None,
) -> None:
    """List calls sent with no answer recorded (counted at their worst case), in the run's store and
    its shards', or settle one from the gateway's bill in the store that has it."""
    import contextlib

    from relaybatch.costs.report import opens_stores
    from relaybatch.costs.terminal import list_unknown, settle_unknown
    from relaybatch.run.handoff import fresh_spend_files
    from relaybatch.run.locking import RESOLVE_ADVICE, holder_of, holding, what_runs_in
    from relaybatch.run_folder import RunPaths
    from relaybatch.settings import run_paths

    paths = run_paths(runs_dir, run_name)
    if not any(
        folder.checkpoint.exists() for folder in paths.shard_folders()
    ):  # shards alone need no merge first
        paths.require_existing()
    # Shards and partitions are read from their ledger.parquet (never another host's SQLite): one
    # whose execution was killed before it wrote it has it written now, under its lock for a moment.
    fresh_spend_files(paths, unrecorded=True)
    if call is None:
        # Listing only reads (read-only stores, files): it needs no lock and lists beside an execution.
        for folder in list_unknown(console, paths.root, store):
            holder = holder_of(folder)
            if holder is None or holder.momentary or holder.merging:
                continue
            if opens_stores(folder):  # read as it stands: its calls in flight too
                console.print(
                    f"executing now: {holder.describe()}; calls it has in flight are listed too and "
                    "settle when they answer"
                )
            else:
                console.print(
                    f"executing now: {holder.describe()}; its calls are listed as of its last "
                    "execution's end (its ledger.parquet): list them again once it has ended"
                )
        return

    def settling(folder: Path) -> contextlib.AbstractContextManager[None]:
        # An execution answers its calls in flight itself: settling one of them from a bill would
        # race its answer. One writer per store folder, a shard's too (run/locking.py).
        activity = f"settling a call of {what_runs_in(RunPaths(folder))}"
        return holding(folder, activity, RESOLVE_ADVICE, momentary=True)

    settle_unknown(console, paths.root, call, charged, not_charged, store, settling)
