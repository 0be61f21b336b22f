"""Scheduled runs that come late or find their run busy end cleanly, never Failed.

After downtime, a restarted `relaybatch serve` (or worker) starts every late scheduled flow run of
a deployment at once, and all but one find the run's store held by another execution (one writer
per store: relaybatch/run/locking.py). That is a normal situation, not a failure: such a flow run
ends **Completed**, in a state named ``Skipped`` whose message says why ("skipped: another
execution holds the run: ..."), with one log line and no traceback. A manifest run is incremental
(done items are never sent again), so one execution catches up all the missed ones.

A deployment's ``catch_up`` (configs/deployments.yaml, a flow parameter) decides which of the late
runs does the work:

- ``once`` (the default): the first late run to start executes for all of them; a late run whose
  due time is before the start of an execution recorded since (it did the work this run was due
  for) is skipped, so late runs started one after the other by a worker also execute once;
- ``latest``: only the latest run that is due executes; a scheduled run with a later run of the
  same deployment already due is skipped.

Runs started by hand (`prefect deployment run`) are never skipped for being late; they are skipped
only when the run is busy. Flow runs with no deployment (`relaybatch run` with a server) are
refused as before: the CLI says who holds the run and exits 1.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any, Literal

from prefect.client.schemas.objects import FlowRun
from prefect.states import Completed, State

from relaybatch.run import RunBusy, RunPaths, executing

CatchUp = Literal["once", "latest"]
SKIPPED = "Skipped"


def _flow_run() -> FlowRun | None:
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    return context.flow_run if context is not None else None


def skipped(reason: str) -> State[Any]:
    """The clean end of a flow run that had nothing to do, with one log line saying why."""
    from prefect.logging import get_run_logger

    message = f"skipped: {reason}"
    get_run_logger().info(message)
    return Completed(name=SKIPPED, message=message)


def hold_or_skip(hold: contextlib.ExitStack, paths: RunPaths, catch_up: CatchUp) -> State[Any] | None:
    """Take the run's lock into ``hold`` (to the end of the flow), or the Skipped state a
    deployment's flow run ends in when the run is busy or another execution caught up already."""
    flow_run = _flow_run()
    if flow_run is None or flow_run.deployment_id is None:
        return None  # not a deployment's run: the plan step takes the lock, or says who holds it
    try:
        hold.enter_context(executing(paths))
    except RunBusy as busy:
        return skipped(f"another execution holds the run ({busy})")
    if flow_run.auto_scheduled and flow_run.expected_start_time is not None:
        reason = _caught_up(paths, flow_run, catch_up)
        if reason is not None:
            return skipped(reason)
    return None


def _caught_up(paths: RunPaths, flow_run: FlowRun, catch_up: CatchUp) -> str | None:
    due = _due(flow_run)
    if catch_up == "latest":
        later = _later_run_due(flow_run, due)
        if later is not None:
            return f"a later run of this deployment ({later}) is due too (catch_up: latest)"
        return None
    newest = _newest_execution(paths)
    # Execution times are read in whole seconds: one that started in the second this run fell due
    # may have started before it, so only a later second proves it came after (when unsure, the
    # run executes: an execution finds nothing new to do, it never re-sends).
    if newest is not None and datetime.fromisoformat(newest["started_at"]) > due.replace(microsecond=0):
        return (
            f"execution {newest['id']} of the run started at {newest['started_at']}, after this run was "
            f"due ({due.isoformat(timespec='seconds')}), and did its work (catch_up: once)"
        )
    return None


def _due(flow_run: FlowRun) -> datetime:
    """When the flow run was last due: the scheduled time of its last Scheduled (or Late) state.

    Prefect sets ``expected_start_time`` once, from the first state, so a run moved by hand (or by
    the API) to another time keeps its first time there; the state history has the time it was
    really due when it left the schedule."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(flow_run.id)
    scheduled = [
        state.state_details.scheduled_time
        for state in sorted(states, key=lambda state: state.timestamp)
        if state.is_scheduled() and state.state_details.scheduled_time is not None
    ]
    due = scheduled[-1] if scheduled else flow_run.expected_start_time
    return due.astimezone(UTC)  # type: ignore[union-attr]


def _newest_execution(paths: RunPaths) -> dict[str, Any] | None:
    from relaybatch.engine import CheckpointStore

    if not paths.checkpoint.exists():
        return None
    with CheckpointStore.open_read_only(paths.checkpoint) as store:
        newest = store.executions(limit=1)
    return newest[0] if newest else None


def _later_run_due(flow_run: FlowRun, due: datetime) -> str | None:
    """The name of another scheduled run of the same deployment due after ``due`` and by now, if any:
    one still waiting (judged by the time it is scheduled for now), or one that has started or ended
    (judged by its expected start); a later run that failed, crashed or was cancelled does not count."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterId,
        FlowRunFilterNextScheduledStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    now = datetime.now(UTC)
    others = FlowRunFilterId(not_any_=[flow_run.id])
    deployment = DeploymentFilter(id=DeploymentFilterId(any_=[flow_run.deployment_id]))  # type: ignore[list-item]
    waiting = FlowRunFilter(
        id=others,
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
        next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(after_=due, before_=now),  # type: ignore[arg-type]
    )
    started = FlowRunFilter(
        id=others,
        state=FlowRunFilterState(
            type=FlowRunFilterStateType(any_=[StateType.PENDING, StateType.RUNNING, StateType.COMPLETED])
        ),
        expected_start_time=FlowRunFilterExpectedStartTime(after_=due, before_=now),  # type: ignore[arg-type]
    )
    with get_client(sync_client=True) as client:
        later = [
            run
            for runs in (
                client.read_flow_runs(
                    flow_run_filter=found,
                    deployment_filter=deployment,
                    sort=FlowRunSort.EXPECTED_START_TIME_DESC,
                    limit=5,
                )
                for found in (waiting, started)
            )
            for run in runs
        ]
    return _first_due(later, due, now)


def _first_due(runs: list[FlowRun], due: datetime, now: datetime) -> str | None:
    """The first of ``runs`` scheduled by its deployment and due after ``due`` and by ``now``."""
    for run in runs:
        run_due = run.next_scheduled_start_time or run.expected_start_time
        if run.auto_scheduled and run_due is not None and due < run_due <= now:
            return f"{run.name}, due {run_due.astimezone(UTC).isoformat(timespec='seconds')}"
    return None
