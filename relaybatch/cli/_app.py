"""The command line's app and what its commands share: the typer app, the console, the one-line user
errors, the arguments and options several commands take, and the gateway's model-catalog check."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from relaybatch.console import output_console
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


def quiet_prefect() -> None:
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


def existing_run(run_name: str, runs_dir: Path | None) -> RunPaths:
    from relaybatch.settings import run_paths

    return run_paths(runs_dir, run_name).require_existing()


def catalog_check(validation: Any, base_url: str | None = None, settings: Settings | None = None) -> None:
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
            return await check_families(validation, client)

    note = asyncio.run(families())
    if note and validation.ok:  # with problems, the error list is the answer, first and alone
        typer.echo(f"note: {note}", err=True)


async def check_families(validation: Any, client: Any) -> str | None:
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


def prefect_server_url() -> str:
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
