"""Serving: `relaybatch deploy` and `relaybatch serve` (Prefect deployments and their automations),
and `relaybatch emulator serve` (the gateway emulator over HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from relaybatch.cli._app import (
    DeploymentsOption,
    app,
    console,
    emulator_app,
    prefect_server_url,
    quiet_prefect,
    reports_user_errors,
)


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
    quiet_prefect()
    import asyncio

    from relaybatch.flows.deployments import load_deployments, register_deployments

    deployments = load_deployments(config)
    url = prefect_server_url()
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
    quiet_prefect()
    import asyncio

    from relaybatch.flows.deployments import load_deployments, runner_deployments, serve_deployments

    specs = load_deployments(config)
    url = prefect_server_url()

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
