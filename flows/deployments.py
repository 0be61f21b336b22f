"""Deployments from configs/deployments.yaml: load, register on a work pool, or serve.

Entrypoints are module paths (``relaybatch.flows.run_manifest.run_manifest``): a worker imports
the installed package, so no source needs pulling and no image building for a process pool.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from prefect import Flow
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron, Interval, RRule, Schedule
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from relaybatch.flows.maintenance import cost_report, export_run
from relaybatch.flows.run_manifest import resume_run, run_manifest
from relaybatch.flows.sharding import run_sharded

from relaybatch.errors import UserError
from relaybatch.manifests.yaml_lines import line_of, load_with_lines

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
# The flows that take a catch-up policy for late scheduled runs (relaybatch/flows/catch_up.py).
CATCH_UP_FLOWS = ("run-manifest", "resume-run")
SCHEDULE_KINDS = ("cron", "interval", "rrule")


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    flow: str
    cron: str | None = Field(default=None, description="a cron expression, e.g. '0 2 * * *'")
    interval: float | None = Field(default=None, gt=0, description="seconds between runs, e.g. 3600")
    rrule: str | None = Field(default=None, description="an iCalendar RRule, e.g. 'FREQ=DAILY;BYHOUR=2'")
    timezone: str = "UTC"
    catch_up: Literal["once", "latest"] = Field(
        default="once",
        description="late runs (after downtime): once = the first one runs for all missed, the others "
        "are skipped; latest = only the latest one due runs",
    )
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=lambda: ["relaybatch"])

    def schedule(self) -> Schedule | None:
        """The deployment's schedule (one of cron, interval, rrule), or None for runs by hand."""
        if self.cron is not None:
            return Cron(self.cron, timezone=self.timezone)
        if self.interval is not None:
            return Interval(self.interval, timezone=self.timezone)
        if self.rrule is not None:
            return RRule(self.rrule, timezone=self.timezone)
        return None

    @field_validator("flow")
    @classmethod
    def known_flow(cls, value: str) -> str:
        if value not in FLOWS:
            raise ValueError(f"unknown flow {value!r}; one of {', '.join(sorted(FLOWS))}")
        return value

    @model_validator(mode="after")
    def valid_schedule(self) -> DeploymentSpec:
        from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule, RRuleSchedule

        given = [kind for kind in SCHEDULE_KINDS if getattr(self, kind) is not None]
        if len(given) > 1:
            raise ValueError(
                f"give one schedule: cron, interval or rrule (this one has {' and '.join(given)})"
            )
        # Prefect's own schedule models check the expression, the rule and the timezone.
        try:
            if self.cron is not None:
                CronSchedule(cron=self.cron, timezone=self.timezone)
            elif self.interval is not None:
                IntervalSchedule(interval=timedelta(seconds=self.interval), timezone=self.timezone)
            elif self.rrule is not None:
                RRuleSchedule(rrule=self.rrule, timezone=self.timezone)
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
        raw, lines, ambiguous = load_with_lines(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such deployments file") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc})") from None
    except ValueError as exc:  # a limit (YamlLimitError), at its line
        line = getattr(exc, "line", None)
        raise UserError(f"{path}:{line}: {exc}" if line else f"{path}: {exc}") from None
    if ambiguous:  # a key written twice, a plain yes/no: each at its line
        raise UserError("\n".join(f"{path}:{line}: {message}" for line, _, message in ambiguous))
    try:
        config = DeploymentsConfig.model_validate(raw)
    except ValidationError as exc:
        raise UserError("\n".join(_located(path, lines, error) for error in exc.errors())) from None
    names = [spec.name for spec in config.deployments]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"{path}: deployment names used twice: {', '.join(duplicates)}")
    return config


def _located(path: Path, lines: dict[Any, int], error: Any) -> str:
    """One problem as ``file:line: field: what is wrong`` (the line of the field, or of the
    deployment holding it; a deployment's own problem names the deployment's line)."""
    location = tuple(error["loc"])
    line = line_of(lines, location)
    field = ".".join(str(part) for part in location) or "the file"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = (
            f"not a deployment setting; one of: {', '.join(DeploymentSpec.model_fields)}"
            if len(location) == 3
            else "not a setting of the file; write work_pool and deployments"
        )
    return f"{path}:{line}: {field}: {message}" if line else f"{path}: {field}: {message}"


def _absolute_paths(parameters: dict[str, Any], base: Path) -> dict[str, Any]:
    resolved = dict(parameters)
    for name in PATH_PARAMETERS:
        value = resolved.get(name)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            resolved[name] = str((base / value).resolve())
    return resolved


async def runner_deployment(spec: DeploymentSpec, base: Path) -> RunnerDeployment:
    """One deployment object, ready to ``apply`` to a work pool or to ``serve``."""
    schedule = spec.schedule()
    parameters = _absolute_paths(spec.parameters, base)
    if spec.flow in CATCH_UP_FLOWS:
        parameters.setdefault("catch_up", spec.catch_up)
    return await FLOWS[spec.flow].ato_deployment(
        name=spec.name,
        schedules=[schedule] if schedule else None,
        parameters=parameters,
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
