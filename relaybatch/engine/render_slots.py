"""Caps on renders in flight: paid remote work (V2 videos, V1 tasks) created and not yet finished.

Providers cap concurrent renders per model, not requests per minute (Runway 1-20 per model by tier,
Kling's error 1303), and a create past the cap is refused. So a run holds its own count:

- ``max_in_flight`` per job (manifest ``video.max_in_flight``) and per model (``run.max_in_flight``);
- a create takes a slot of its job and of its model before it is sent, and waits while either is
  full (the engine holds the job, its items stay pending, and feeds it again when a slot frees);
- a render frees its slots when it ends (done, failed, cancelled) or its create did not start one;
- a create the gateway refuses for concurrency (``is_concurrency_refusal``) frees its slot, goes
  back to wait, and the run **learns** the model's cap: the number it had in flight then (or the
  limit the answer names), the way the limiter learns a rate limit from a 429.

Work found in flight when an execution starts (submitted by an earlier one) occupies slots too,
even past a cap: it is paid and rendering.

``RenderSlots`` is the interface the engine uses; ``LocalRenderSlots`` keeps the counts in this
process. A fleet of workers sharing one cap holds it on the Prefect server behind the same calls
(relaybatch/fleet/renders.py): ``take`` may then wait for the server, and ``freed`` returns when a
slot may have freed in another process (the engine then feeds the jobs waiting for one again).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Protocol

from relaybatch.gateway import APIStatusError, RateLimited


class RenderSlots(Protocol):
    async def take(self, job: str, model: str) -> bool:
        """Take a slot of the job and of the model if both have room; False (nothing taken) if not."""

    async def freed(self) -> None:
        """Return when a slot may have freed outside this process (local slots: never)."""

    def occupy(self, job: str, model: str) -> None:
        """Count a render already under way (a resumed run's), whatever the caps say."""

    def release(self, job: str, model: str) -> None:
        """A render ended, or its create started none."""

    def learn(self, model: str, cap: int) -> None:
        """The gateway refused a create for concurrency at ``cap`` renders of ``model``."""

    def in_flight(self, model: str) -> int:
        """Renders of ``model`` this run counts as under way."""


class LocalRenderSlots:
    """Counts in this process (module docstring)."""

    def __init__(
        self, per_job: dict[str, int] | None = None, per_model: dict[str, int] | None = None
    ) -> None:
        self.per_job = dict(per_job or {})
        self.per_model = dict(per_model or {})
        self.learned: dict[str, int] = {}
        self.jobs: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()  # the most renders of each model in flight at once

    def cap_of(self, model: str) -> int | None:
        caps = [cap for cap in (self.per_model.get(model), self.learned.get(model)) if cap]
        return min(caps) if caps else None

    async def take(self, job: str, model: str) -> bool:
        return self.take_here(job, model)

    def take_here(self, job: str, model: str) -> bool:
        """``take`` against this process's counts alone."""
        if not self.has_room(job, model):
            return False
        self.occupy(job, model)
        return True

    def has_room(self, job: str, model: str) -> bool:
        job_cap, model_cap = self.per_job.get(job), self.cap_of(model)
        return not (
            (job_cap and self.jobs[job] >= job_cap) or (model_cap and self.models[model] >= model_cap)
        )

    async def freed(self) -> None:
        await asyncio.Event().wait()  # nothing outside this process frees a local slot

    def occupy(self, job: str, model: str) -> None:
        self.jobs[job] += 1
        self.models[model] += 1
        self.peak[model] = max(self.peak[model], self.models[model])

    def release(self, job: str, model: str) -> None:
        self.jobs[job] = max(0, self.jobs[job] - 1)
        self.models[model] = max(0, self.models[model] - 1)

    def learn(self, model: str, cap: int) -> None:
        self.learned[model] = max(1, min(cap, self.learned.get(model, cap)))

    def in_flight(self, model: str) -> int:
        return self.models[model]


def is_concurrency_refusal(error: APIStatusError) -> bool:
    """A 429 that is not the request window's: no ``error.rate_limit``, and the window not spent
    (``x-ratelimit-remaining-requests`` absent or above 0). For a billed create of a render this is
    the provider's cap on renders in flight (the emulator's names it in ``error.concurrency``)."""
    if not isinstance(error, RateLimited) or error.rate_limit is not None:
        return False
    remaining = error.rate_limit_headers.get("remaining_requests")
    return remaining is None or remaining > 0


def named_cap(error: APIStatusError) -> int | None:
    """The cap the refusal names (``error.concurrency.limit``), when it names one."""
    body = error.body if isinstance(error.body, dict) else {}
    details = body.get("error") if isinstance(body.get("error"), dict) else {}
    concurrency = details.get("concurrency") if isinstance(details, dict) else None
    limit = concurrency.get("limit") if isinstance(concurrency, dict) else None
    return limit if isinstance(limit, int) and limit > 0 else None
