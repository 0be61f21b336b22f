"""`relaybatch plan`: per job, the expected cost and the worst case, from the run's own cost model.

Nothing billed is sent: the only calls are GET /v1/models/pricing, once per (model, provider).
Each item is priced twice with the functions the run itself uses: ``price_call`` on the expected
counts (``expected.py``) and ``worst_case_usd``, the reservation the budget makes before sending.
So the worst case of a plan is what a budget will hold, and the gateway never bills more.
Items stream through; memory holds one line per (job, kind, model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from relaybatch.cost_model import (
    EXPECTED_ANSWER_TOKENS,
    REASONING_UNKNOWN,
    ROUTE_PRICED_KINDS,
    TOKEN_KINDS,
    Expected,
    ModelPrices,
    PriceBook,
    PricingError,
    UsageCounts,
    call_model,
    expected_usage,
    fetch_pricing,
    judgment_prices,
    output_cap,
    price_call,
    web_search_prices,
    worst_case_usd,
)
from relaybatch.costs.observed import ObservedOutput


@dataclass
class JobPlan:
    """One (job, kind, model): items, expected counts, expected and worst-case USD."""

    job: str
    kind: str
    model: str
    provider: str | None = None
    items: int = 0
    input_tokens: int = 0  # text input + input image tokens
    output_tokens: int = 0  # text output + output image tokens
    images: int = 0
    video_seconds: Decimal = Decimal(0)
    expected_usd: Decimal = Decimal(0)
    worst_usd: Decimal = Decimal(0)
    unpriced: int = 0  # items whose expected cost or worst case could not be priced
    unknowns: set[str] = field(default_factory=set)
    # Earlier runs' charged calls of this job and model, when the output is learnt from them.
    observed: ObservedOutput | None = None
    # The output cap the requests set (the largest), for the assumption stated without history.
    output_cap: int | None = None

    @property
    def priced(self) -> bool:
        return self.unpriced == 0

    def add(self, usage: UsageCounts, expected: Decimal | None, worst: Decimal | None) -> None:
        self.items += 1
        self.input_tokens += usage.input_tokens + usage.input_image_tokens
        self.output_tokens += usage.output_tokens + usage.output_image_tokens
        self.images += usage.images
        self.video_seconds += usage.video_seconds + usage.video_seconds_with_audio
        if expected is None or worst is None:
            self.unpriced += 1
            return
        self.expected_usd += expected
        self.worst_usd += worst


@dataclass
class Plan:
    jobs: list[JobPlan]
    notes: list[str] = field(default_factory=list)

    @property
    def expected_usd(self) -> Decimal:
        return sum((job.expected_usd for job in self.jobs), Decimal(0))

    @property
    def worst_usd(self) -> Decimal:
        return sum((job.worst_usd for job in self.jobs), Decimal(0))

    @property
    def complete(self) -> bool:
        """True when every item was priced (else the totals leave some out)."""
        return all(job.priced for job in self.jobs)


def _prices_of(kind: str, model: str, book: PriceBook, provider: str | None) -> ModelPrices | None:
    if kind == "judgment":
        return judgment_prices(model)
    if kind == "web_search":
        return web_search_prices(model)
    return book.get(model, provider)


def _usd(value: Any) -> Decimal | None:
    return value if isinstance(value, Decimal) else None


async def make_plan(
    items: Iterable[Any],
    client: Any,
    providers: Mapping[str, str] | None = None,
    observed: Mapping[tuple[str, str], ObservedOutput] | None = None,
) -> Plan:
    """Price every item (streaming) with the run's cost model; one pricing lookup per model. With
    ``observed`` (costs/observed.py), a text job's output is what its earlier calls wrote."""
    observed = observed or {}
    providers = dict(providers or {})
    book = PriceBook(lambda model, provider: fetch_pricing(client, model, provider))
    groups: dict[tuple[str, str, str], JobPlan] = {}
    notes: list[str] = []
    asked: set[tuple[str, str | None]] = set()
    for item in items:
        model = call_model(item.kind, item.request)
        provider = providers.get(item.job)
        if item.kind in ROUTE_PRICED_KINDS and model and (model, provider) not in asked:
            asked.add((model, provider))
            try:
                if await book.load(model, provider, job=item.job) is None:
                    notes.append(f"model {model!r}: the gateway publishes no price (404)")
            except PricingError as error:
                notes.append(str(error))
        prices = _prices_of(item.kind, model, book, provider)
        group = groups.get((item.job, item.kind, model))
        if group is None:
            group = JobPlan(item.job, item.kind, model, prices.provider if prices else provider)
            group.observed = observed.get((item.job, model)) if item.kind in TOKEN_KINDS else None
            groups[(item.job, item.kind, model)] = group
        expected = expected_usage(item.kind, item.request, prices)
        if item.kind in TOKEN_KINDS:
            expected = _learnt(expected, group, output_cap(item.kind, item.request))
        group.unknowns.update(expected.unknowns)
        cost = price_call(prices, expected.usage) if prices is not None else None
        worst = worst_case_usd(item.kind, item.request, prices)
        group.add(expected.usage, None if cost is None else _usd(cost.usd), worst)
    return Plan(list(groups.values()), notes)


def _learnt(expected: Expected, group: JobPlan, cap: int) -> Expected:
    """The expected output of one text call: what the job's earlier calls wrote, when there are any."""
    group.output_cap = max(group.output_cap or 0, cap)
    seen = group.observed
    if seen is None:
        return expected
    # An item takes as many calls as the job's earlier items did (a structured job's re-asks).
    calls = seen.calls_per_item
    usage = replace(
        expected.usage,
        input_tokens=round(expected.usage.input_tokens * calls),
        output_tokens=round(min(seen.mean_output, cap) * calls),
        reasoning_tokens=round(seen.mean_reasoning * calls),
    )
    return Expected(usage, tuple(name for name in expected.unknowns if name != REASONING_UNKNOWN))


def output_notes(plan: Plan) -> list[str]:
    """Where each text job's expected output comes from, in words: earlier answers, or the assumption."""
    notes = []
    for job in plan.jobs:
        if job.kind not in TOKEN_KINDS:
            continue
        seen = job.observed
        if seen is not None:
            runs = f"{seen.runs} earlier run" + ("s" if seen.runs != 1 else "")
            notes.append(
                f"job {job.job} ({job.model}): output from {seen.calls:,} earlier answers in {runs}, "
                f"{seen.mean_output:,} tokens an answer"
                + (f" and {seen.mean_reasoning:,} reasoning" if seen.mean_reasoning else "")
                + (f", {seen.calls_per_item:.2f} calls an item (re-asks)" if seen.calls > seen.items else "")
            )
        else:
            notes.append(
                f"job {job.job} ({job.model}): no earlier answers; assumed {EXPECTED_ANSWER_TOKENS} output "
                "tokens an answer (a typical answer of its schema for a structured job; the cap when lower; "
                f"the cap is {job.output_cap:,}, the worst case "
                "assumes every answer fills it); a run of a few items teaches the plan real lengths"
            )
    return notes
