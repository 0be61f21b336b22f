"""What a self-hosted Prefect server lacks for a fleet of workers, installed by `relaybatch deploy`.

Prefect Cloud marks a flow run whose process died as Crashed (its "unresponsive run detection"); a
self-hosted server leaves it Running forever, so its partition would never be run again. Two
automations, as Prefect's docs on zombie flows describe them, close that gap:

- ``relaybatch: crash silent flow runs``: a flow run of a deployment sends a heartbeat event every
  ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (set it on every worker: 30 is the smallest Prefect
  accepts); one whose heartbeats stop for ``silent_after`` seconds without a final state is set
  Crashed.
- ``relaybatch: re-run crashed partitions``: a flow run of a relaybatch deployment that ends Crashed
  is set back to Scheduled (``AwaitingRetry``), so any worker of the pool picks it up again with the
  same parameters. Its checkpoint store knows what was sent: nothing done is sent again, and what
  the dead process may have sent without an answer is reported uncertain (the run's policy).

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


def zombie_automation(silent_after: float = SILENT_AFTER_SECONDS) -> Automation:
    return Automation(
        name=ZOMBIES,
        description="A flow run whose heartbeats stopped without a final state is Crashed (relaybatch).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{state}" for state in _FINAL)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
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


def rerun_automation(tag: str = "relaybatch") -> Automation:
    return Automation(
        name=RERUN,
        description="A crashed relaybatch flow run is scheduled again; its checkpoint resumes it.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{tag}"}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="AwaitingRetry",
                message="crashed: scheduled again for any worker of the pool (relaybatch)",
                force=True,
            )
        ],
    )


async def install_automations(silent_after: float = SILENT_AFTER_SECONDS) -> list[str]:
    """Create (or replace, by name) both automations on the configured server; their names."""
    installed = []
    for automation in (zombie_automation(silent_after), rerun_automation()):
        try:
            existing = await Automation.aread(name=automation.name)
        except ValueError:
            existing = None
        if existing is not None:
            await existing.adelete()
        await automation.acreate()
        installed.append(automation.name)
    return installed
