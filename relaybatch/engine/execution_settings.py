"""What an execution is told and what it answers: the engine's settings (``EngineSettings``), the
summary ``execute`` returns (``RunSummary``), the test hook's points, and the stop messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from relaybatch.engine.poll_plan import RenderSettings
from relaybatch.engine.poller import PollSettings
from relaybatch.engine.reasks import OutputCheck
from relaybatch.engine.resume import UncertainPolicy
from relaybatch.engine.states import UNCERTAIN
from relaybatch.gateway.retry import RetryPolicy

Hook = Callable[[str, str], None]
"""Called as hook(point, item_key) at each step; points, in order for a billed create: reserved
(the budget admitted it), sending_committed (reservation and `sending` durable; the send follows),
answered, settled (the charge priced and queued; durable with the next commit), result_committed;
for polls: poll_sending, poll_answered, poll_committed. Tests raise from it, or kill, to crash."""

# The display's refresh: well under a second, so the screen answers as soon as the run starts.
REPORT_EVERY_SECONDS = 0.5

STOPPED_BEFORE_SEND = "stopped before its request left: not sent, not billed"

USER_STOP_MESSAGE = "stopped on request: submitted work was checkpointed; run the manifest again to resume"


@dataclass(frozen=True)
class EngineSettings:
    """How an execution behaves; every field has a default that suits a batch run."""

    concurrency: int = 64
    # The one attempt budget and back-off for every item (None: the client's policy, which the
    # RELAYBATCH_RETRY__* settings set). The engine owns these retries; the client makes one try.
    retry: RetryPolicy | None = None
    uncertain_policy: UncertainPolicy = "report"
    cancel_remote_on_stop: bool = False
    poll: PollSettings = field(default_factory=PollSettings)
    page_size: int = 1000
    # Structured jobs by name: the schema each answer is checked against, and its re-asks (reasks.py).
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    # Per job: expected render time, render deadline and what happens past it (poll_plan.py).
    renders: RenderSettings = field(default_factory=RenderSettings)


@dataclass(frozen=True)
class RunSummary:
    sent: int
    counts: dict[str, int]
    stopped: str | None = None
    spent_usd: Decimal | None = None
    # Jobs whose own budget refused a call: they stopped submitting (their items left pending),
    # the run's other jobs went on. Each with the budget's message; also part of ``stopped``.
    jobs_stopped: dict[str, str] = field(default_factory=dict)

    @property
    def uncertain(self) -> int:
        return self.counts.get(UNCERTAIN, 0)
