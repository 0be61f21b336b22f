"""Deployments from configs/deployments.yaml: load, register on a work pool, or serve.

Entrypoints are module paths (``relaybatch.flows.run_manifest.run_manifest``): a worker imports
the installed package, so no source needs pulling and no image building for a process pool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from prefect import Flow
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from relaybatch.flows.maintenance import cost_report, export_run
from relaybatch.flows.run_manifest import resume_run, run_manifest
from relaybatch.flows.sharding import run_sharded

from relaybatch.errors import UserError

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "deployments.yaml"
DEFAULT_WORK_POOL = "relaybatch-local"

FLOWS: dict[str, Flow[Any, Any]] = {
    "run-manifest": run_manifest,
    "resume-run": resume_run,
    "run-sharded": run_sharded,
    "export-run": export_run,
    "cost-report": cost_report,
}
# Parameters that name files: made absolute at registration, so a worker in any folder finds them.
PATH_PARAMETERS = ("manifest", "runs_dir")


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    flow: str
    cron: str | None = None
    timezone: str = "UTC"
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=lambda: ["relaybatch"])

    @field_validator("flow")
    @classmethod
    def known_flow(cls, value: str) -> str:
        if value not in FLOWS:
            raise ValueError(f"unknown flow {value!r}; one of {', '.join(sorted(FLOWS))}")
        return value

    @model_validator(mode="after")
    def valid_schedule(self) -> DeploymentSpec:
        if self.cron is not None:
            from prefect.client.schemas.schedules import CronSchedule

            # Prefect's own schedule model checks the expression and the timezone.
            try:
                CronSchedule(cron=self.cron, timezone=self.timezone)
            except ValidationError as exc:
                raise ValueError("; ".join(error["msg"] for error in exc.errors())) from None
        return self


class DeploymentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    work_pool: str = DEFAULT_WORK_POOL
    deployments: list[DeploymentSpec]


def load_deployments(path: Path | None = None) -> DeploymentsConfig:
    """Read and validate the deployments file; errors name the file and the field."""
    path = path or DEFAULT_CONFIG
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such deployments file") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})") from None
    try:
        config = DeploymentsConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise UserError(f"{path}: {problems}") from None
    names = [spec.name for spec in config.deployments]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"{path}: deployment names used twice: {', '.join(duplicates)}")
    return config


def _absolute_paths(parameters: dict[str, Any], base: Path) -> dict[str, Any]:
    resolved = dict(parameters)
    for name in PATH_PARAMETERS:
        value = resolved.get(name)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            resolved[name] = str((base / value).resolve())
    return resolved


async def runner_deployment(spec: DeploymentSpec, base: Path) -> RunnerDeployment:
    """One deployment object, ready to ``apply`` to a work pool or to ``serve``."""
    schedules = [Cron(spec.cron, timezone=spec.timezone)] if spec.cron else None
    return await FLOWS[spec.flow].ato_deployment(
        name=spec.name,
        schedules=schedules,
        parameters=_absolute_paths(spec.parameters, base),
        description=spec.description,
        tags=spec.tags,
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


async def runner_deployments(config: DeploymentsConfig, base: Path | None = None) -> list[RunnerDeployment]:
    base = base or Path.cwd()
    return [await runner_deployment(spec, base) for spec in config.deployments]


async def ensure_process_pool(name: str) -> bool:
    """Create a process work pool if there is none of that name; True when created."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_work_pool(name)
            return False
        except ObjectNotFound:
            pass
        try:
            await client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            return False
        return True


async def register_deployments(
    config: DeploymentsConfig, work_pool: str | None = None, base: Path | None = None
) -> list[str]:
    """Register every deployment on the work pool; returns ``flow/deployment`` names."""
    pool = work_pool or config.work_pool
    await ensure_process_pool(pool)
    registered = []
    base = base or Path.cwd()
    for spec, deployment in zip(config.deployments, await runner_deployments(config, base), strict=True):
        # A process worker starts each run in a temporary folder unless told otherwise; runs
        # must land in the project's runs folder, so the run starts where `deploy` was run.
        deployment.job_variables = {"working_dir": str(base.resolve())}
        await deployment.aapply(work_pool_name=pool)
        registered.append(f"{FLOWS[spec.flow].name}/{spec.name}")
    return registered


async def serve_deployments(deployments: list[RunnerDeployment], say: Any = print) -> None:
    """Register the deployments and run their flow runs from this process until SIGINT/SIGTERM.

    Prefect's own ``serve`` pauses every schedule on the way out, and its SIGINT path leaves
    ``Runner.astop`` un-awaited; here one signal stops the runner cleanly (flow runs still going
    are cancelled by the runner and end Cancelled after their own clean stop) and schedules stay
    as they were, so stopping ``serve`` for a restart never silences a nightly run.
    """
    import asyncio
    import signal

    from prefect.runner import Runner

    runner = Runner(pause_on_shutdown=False)
    for deployment in deployments:
        await runner.aadd_deployment(deployment)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    serving = asyncio.ensure_future(runner.start())
    try:
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not serving.done():
            say("stopping: cancelling flow runs in progress (each stops cleanly); schedules stay as they are")
            await runner.astop()
        await serving
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
