"""What a self-hosted Prefect server lacks for a fleet of workers, installed by `relaybatch deploy`.

Prefect Cloud marks a flow run whose process died as Crashed (its "unresponsive run detection"); a
self-hosted server leaves it Running forever, so its partition would never be run again. Two
automations, as Prefect's docs on zombie flows describe them, close that gap:

- ``relaybatch: crash silent flow runs``: a flow run of a deployment sends a heartbeat event every
  ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (set it on every worker: 30 is the smallest Prefect
  accepts); a relaybatch flow run whose heartbeats stop for ``silent_after`` seconds without a
  final state is set Crashed (never over a final state: the action is not forced).
- ``relaybatch: re-run crashed partitions``: a relaybatch flow run that ends Crashed (set so above,
  or by its worker, which saw its process die) is set back to Scheduled (``AwaitingRetry``), so any
  worker of the pool picks it up again with the same parameters. Its checkpoint store knows what
  was sent: nothing done is sent again, and what the dead process may have sent without an answer
  is reported uncertain (the run's policy).

Events sent while the server restarts can be lost. Seen here: a Crashed event at that moment, so
the partition stayed Crashed; and heartbeats or Completed events, so the silence automation fired
on finished runs (refused: they are final; setting them straight to Scheduled instead re-ran
completed partitions). `relaybatch submit --wait` therefore also schedules again any partition it
sees Crashed (flows/partitions.py).

Both are found by name and replaced on each `relaybatch deploy`, so running it again is safe.
"""

from __future__ import annotations

from datetime import timedelta

from prefect.automations import Automation
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification

ZOMBIES = "relaybatch: crash silent flow runs"
RERUN = "relaybatch: re-run crashed partitions"
# Three heartbeats missed at the smallest frequency Prefect allows (30 s).
SILENT_AFTER_SECONDS = 90
_FINAL = ("Completed", "Failed", "Cancelled", "Crashed")


def zombie_automation(silent_after: float = SILENT_AFTER_SECONDS, tag: str = "relaybatch") -> Automation:
    return Automation(
        name=ZOMBIES,
        description="A relaybatch flow run whose heartbeats stopped before a final state is Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{state}" for state in _FINAL)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=_tagged(tag),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=silent_after),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {silent_after:g} s: the process running it is gone",
            )
        ],
    )


def _tagged(tag: str) -> ResourceSpecification:
    return ResourceSpecification(
        {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{tag}"}
    )


def rerun_automation(tag: str = "relaybatch") -> Automation:
    return Automation(
        name=RERUN,
        description="A crashed relaybatch flow run is scheduled again; its checkpoint resumes it.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=_tagged(tag),
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[_crashed_again()],
    )


def _crashed_again() -> ChangeFlowRunState:
    """Crashed is final, so this one is forced (only a Crashed run gets here)."""
    return ChangeFlowRunState(
        state=StateType.SCHEDULED,
        name="AwaitingRetry",
        message="crashed: scheduled again for any worker of the pool (relaybatch)",
        force=True,
    )


async def install_automations(silent_after: float = SILENT_AFTER_SECONDS) -> list[str]:
    """Create (or replace, by name) both automations on the configured server; their names."""
    installed = []
    for automation in (zombie_automation(silent_after), rerun_automation()):
        await _delete(automation.name)
        await automation.acreate()
        installed.append(automation.name)
    return installed


async def _delete(name: str) -> None:
    try:
        existing = await Automation.aread(name=name)
    except ValueError:
        return
    await existing.adelete()
