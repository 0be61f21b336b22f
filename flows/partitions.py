"""A run's partitions as flow runs of one deployment: submitted at once, pulled by any worker.

`relaybatch submit` prepares the split (relaybatch/run/partitions.py) and creates one flow run of
the ``run-manifest`` deployment per partition (``partition="I/N"``); workers of the deployment's
pool (`prefect worker start --pool POOL`, one per machine, any number) take them as they free
up, so a faster machine takes more partitions and a slow one holds no one else up. ``follow``
shows them until every one has ended, then the run is merged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.deployments import run_deployment

# Final states of a partition's flow run; a Crashed one is scheduled again (by the automation
# `relaybatch deploy` installs, flows/automations.py, or by ``follow``), so it is followed on.
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
# How many times ``follow`` schedules a crashed or failed partition again.
RUN_AGAIN = 3


@dataclass(frozen=True)
class PartitionRun:
    """Where a partition's flow run is: its state, and the process running it (or that ran it):
    the process id its worker recorded, on the worker's machine."""

    partition: str
    flow_run_id: UUID
    name: str
    state: str
    pid: str
    # When it is (or was) due: a partition scheduled again is due now, behind every waiting one.
    expected: datetime | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL


async def submit_partitions(
    deployment: str, manifest: Path, runs_dir: Path | None, count: int
) -> list[tuple[str, UUID]]:
    """One flow run of ``deployment`` per partition; returns (partition, flow run id) each."""
    submitted = []
    for index in range(1, count + 1):
        partition = f"{index}/{count}"
        parameters = {
            "manifest": str(manifest.resolve()),
            "runs_dir": str(runs_dir.resolve()) if runs_dir else None,
            "partition": partition,
        }
        flow_run = await run_deployment(deployment, parameters=parameters, timeout=0, as_subflow=False)
        submitted.append((partition, flow_run.id))
    return submitted


async def partition_runs(submitted: list[tuple[str, UUID]]) -> list[PartitionRun]:
    """The flow runs' states now, in partition order."""
    ids = [flow_run_id for _, flow_run_id in submitted]
    async with get_client() as client:
        flow_runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
    by_id = {flow_run.id: flow_run for flow_run in flow_runs}
    runs = []
    for partition, flow_run_id in submitted:
        flow_run = by_id.get(flow_run_id)
        state = flow_run.state.type.value if flow_run and flow_run.state else "UNKNOWN"
        pid = str(flow_run.infrastructure_pid or "") if flow_run else ""  # what a process worker started
        expected = flow_run.expected_start_time if flow_run else None
        runs.append(
            PartitionRun(partition, flow_run_id, flow_run.name if flow_run else "", state, pid, expected)
        )
    return runs


async def flow_runs_named(names: list[str]) -> dict[str, str]:
    """Each named flow run's state on the server and the process its worker started there (a
    process worker records it as its infrastructure pid), as `relaybatch status` shows them beside
    each partition: "COMPLETED (pid 4242)"."""
    from prefect.client.schemas.filters import FlowRunFilterName

    async with get_client() as client:
        flow_runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=names))
        )
    found = {}
    for flow_run in flow_runs:
        state = flow_run.state.type.value if flow_run.state else "UNKNOWN"
        pid = f" (pid {flow_run.infrastructure_pid})" if flow_run.infrastructure_pid else ""
        found[flow_run.name] = f"{state}{pid}"
    return found


async def follow(
    submitted: list[tuple[str, UUID]],
    show: Callable[[list[PartitionRun]], None],
    every: float = 2.0,
) -> list[PartitionRun]:
    """Show the partitions' flow runs every ``every`` seconds until each has a final state.

    A partition that ran and is scheduled again (crashed, then re-run by the automation or here)
    goes to the front of the pool's queue, ahead of the partitions not started yet: the next free
    worker resumes it instead of starting another (workers take the earliest due first)."""
    again: dict[UUID, int] = {}
    started: set[UUID] = set()  # seen past Scheduled since it was last put in front
    front: datetime | None = None
    while True:
        try:
            runs = await partition_runs(submitted)
        except Exception:  # the server restarting: keep following
            await asyncio.sleep(every)
            continue
        show(runs)
        due = [run.expected for run in runs if run.expected is not None]
        if front is None and due:
            front = min(due) - timedelta(seconds=1)
        scheduled = False
        for run in runs:
            if run.state in ("PENDING", "RUNNING"):
                started.add(run.flow_run_id)
            # Crashed: the automations' events may have been lost (a server restart). Failed: a flow
            # run that lost the server mid-way fails; its checkpoint resumes it. A few times only: a
            # partition that keeps failing has a cause a person must see.
            if run.state in ("CRASHED", "FAILED") and again.get(run.flow_run_id, 0) < RUN_AGAIN:
                again[run.flow_run_id] = again.get(run.flow_run_id, 0) + 1
                await schedule_again(run.flow_run_id, front)
                started.discard(run.flow_run_id)
                scheduled = True
            elif run.state == "SCHEDULED" and run.flow_run_id in started:  # re-run by the automation
                await schedule_again(run.flow_run_id, front)
                started.discard(run.flow_run_id)
                scheduled = True
        if not scheduled and all(run.final for run in runs):
            return runs
        await asyncio.sleep(every)


async def schedule_again(flow_run_id: UUID, front: datetime | None = None) -> None:
    """A crashed or failed partition back to Scheduled, for any worker of the pool (as the
    automation does for a crashed one); due at ``front`` (the earliest partition's due time), so
    it is taken before the partitions still waiting."""
    from prefect.states import AwaitingRetry

    async with get_client() as client:
        await client.set_flow_run_state(
            flow_run_id,
            AwaitingRetry(message="crashed: scheduled again", scheduled_time=front),
            force=True,
        )
