"""A run's spans and metrics, fed by the engine's two seams: the spend guard and the progress reporter.

Spans: ``relaybatch.run`` (one execution) > ``relaybatch.job`` (one per job, opened at its first
billed request) > ``relaybatch.request`` (one per billed request: from the budget's reservation to
the answer being settled or released). Our attributes: ``relaybatch.item.key``,
``relaybatch.item.id``, ``relaybatch.job``, ``relaybatch.kind``, ``relaybatch.attempt``,
``relaybatch.reservation_usd``, ``relaybatch.cost_usd``, ``relaybatch.outcome`` (``charged``,
``unknown``: sent with no answer recorded, ``not_charged``). The GenAI semantic conventions are
still in development, so their names (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens`` and the
``gen_ai.client.token.usage`` histogram) are added only with the conventions' own opt-in,
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.

Metrics: ``relaybatch.requests`` (by outcome and kind), ``relaybatch.items.finished`` (by kind and
state), ``relaybatch.tokens`` (by type), ``relaybatch.cost`` (USD), and gauges read from the latest
progress snapshot: ``relaybatch.budget.remaining``, ``relaybatch.limiter.limit`` (requests per
minute), ``relaybatch.requests.in_flight``, ``relaybatch.queue.depth``, ``relaybatch.polling``,
``relaybatch.rate_limited`` (429s so far).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from relaybatch.engine.progress import ProgressReporter, Snapshot
from relaybatch.engine.spend import BilledCall, Refused, SpendFigures, SpendGuard

GEN_AI_OPT_IN = "gen_ai_latest_experimental"
# What each kind does, in the GenAI conventions' operation names.
OPERATIONS = {
    "chat": "chat",
    "responses": "chat",
    "messages": "chat",
    "judgment": "chat",
    "generate_content": "generate_content",
    "image": "generate_content",
    "video": "generate_content",
    "video_v1": "generate_content",
    "web_search": "execute_tool",
}


def gen_ai_opted_in() -> bool:
    names = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    return GEN_AI_OPT_IN in [name.strip() for name in names.split(",")]


def _tokens(call: BilledCall, result: dict[str, Any] | None) -> tuple[int, int] | None:
    """Input and output tokens of an answer, read by the cost model's own usage reader."""
    if result is None:
        return None
    from relaybatch.cost_model import UsageError, usage_for_call

    try:
        usage = usage_for_call(call.kind, call.request, result)
    except (UsageError, KeyError, TypeError, ValueError):
        return None
    tokens_in = (
        usage.input_tokens
        + usage.cache_read_tokens
        + usage.cache_write_5m_tokens
        + usage.cache_write_1h_tokens
        + usage.input_image_tokens
    )
    return tokens_in, usage.output_tokens + usage.reasoning_tokens + usage.output_image_tokens


class RunTelemetry:
    """Spans and metrics of one execution; ``close`` ends the spans and flushes the exporters."""

    def __init__(
        self,
        run: str,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        *,
        on_update: Callable[[], None] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.run = run
        self.tracer = tracer_provider.get_tracer("relaybatch")
        self.meter = meter_provider.get_meter("relaybatch")
        self.gen_ai = gen_ai_opted_in()
        self.on_update = on_update or (lambda: None)
        self.on_close = on_close or (lambda: None)
        self.latest: Snapshot | None = None
        self.finished_seen: dict[str, int] = {}
        self.lock = threading.Lock()
        self.run_span = self.tracer.start_span("relaybatch.run", attributes={"relaybatch.run": run})
        self.job_spans: dict[str, Span] = {}
        self.requests: dict[str, Span] = {}
        self.closed = False
        self.stopped: str | None = None  # why the execution stopped early, from its last snapshot
        self.prometheus_port: int | None = None  # where the Prometheus endpoint listens, if it does
        self._instruments()

    def _instruments(self) -> None:
        meter = self.meter
        self.requests_counter = meter.create_counter(
            "relaybatch.requests", unit="{request}", description="Billed requests by outcome and kind."
        )
        self.items_counter = meter.create_counter(
            "relaybatch.items.finished", unit="{item}", description="Items reaching a final state."
        )
        self.tokens_counter = meter.create_counter(
            "relaybatch.tokens", unit="{token}", description="Tokens of answered requests, by type."
        )
        self.cost_counter = meter.create_counter("relaybatch.cost", unit="USD", description="Known charges.")
        self.token_usage = (
            meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Tokens used per request."
            )
            if self.gen_ai
            else None
        )
        gauges: dict[str, tuple[str, str, Callable[[Snapshot], float | None]]] = {
            "relaybatch.budget.remaining": (
                "USD",
                "Budget left: limit less spent, unknown and reserved.",
                _left,
            ),
            "relaybatch.limiter.limit": ("{request}/min", "The limiter's current limit.", _limit),
            "relaybatch.requests.in_flight": ("{request}", "Billed requests in flight.", _in_flight),
            "relaybatch.queue.depth": ("{item}", "Items queued for a worker.", _queued),
            "relaybatch.polling": ("{item}", "Remote jobs being polled.", _polling),
            "relaybatch.rate_limited": ("{response}", "429 answers seen so far.", _rate_limited),
        }
        for name, (unit, description, read) in gauges.items():
            meter.create_observable_gauge(name, [self._observer(read)], unit=unit, description=description)

    def _observer(
        self, read: Callable[[Snapshot], float | None]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            snapshot = self.latest
            value = None if snapshot is None else read(snapshot)
            return [] if value is None else [Observation(value, {"relaybatch.run": self.run})]

        return observe

    # -- requests (from the spend guard) -------------------------------------------------------

    def _job_span(self, job: str) -> Span:
        span = self.job_spans.get(job)
        if span is None:
            context = trace.set_span_in_context(self.run_span)
            span = self.tracer.start_span(
                "relaybatch.job", context=context, attributes={"relaybatch.job": job}
            )
            self.job_spans[job] = span
        return span

    def request_started(self, call: BilledCall, reserved_usd: Decimal | None) -> None:
        attributes: dict[str, Any] = {
            "relaybatch.item.key": call.key,
            "relaybatch.item.id": call.item_id,
            "relaybatch.job": call.job,
            "relaybatch.kind": call.kind,
            "relaybatch.attempt": call.attempt,
        }
        if reserved_usd is not None:
            attributes["relaybatch.reservation_usd"] = str(reserved_usd)
        model = call.request.get("model")
        if self.gen_ai:
            attributes[gen_ai.GEN_AI_OPERATION_NAME] = OPERATIONS.get(call.kind, call.kind)
            if isinstance(model, str):
                attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        with self.lock:
            context = trace.set_span_in_context(self._job_span(call.job))
            span = self.tracer.start_span("relaybatch.request", context=context, attributes=attributes)
            self.requests[f"{call.key}:{call.attempt}"] = span

    def request_ended(
        self, call: BilledCall, outcome: str, cost: Decimal | None, result: dict[str, Any] | None
    ) -> None:
        with self.lock:
            span = self.requests.pop(f"{call.key}:{call.attempt}", None)
        labels = {"relaybatch.outcome": outcome, "relaybatch.kind": call.kind}
        self.requests_counter.add(1, labels)
        tokens = _tokens(call, result)
        if tokens is not None:
            for kind, count in zip(("input", "output"), tokens, strict=True):
                self.tokens_counter.add(count, {"relaybatch.token.type": kind, "relaybatch.kind": call.kind})
                if self.token_usage is not None:
                    self.token_usage.record(count, {gen_ai.GEN_AI_TOKEN_TYPE: kind})
        if cost is not None:
            self.cost_counter.add(float(cost), {"relaybatch.kind": call.kind, "relaybatch.job": call.job})
        if span is None:
            return
        span.set_attribute("relaybatch.outcome", outcome)
        if cost is not None:
            span.set_attribute("relaybatch.cost_usd", str(cost))
        if tokens is not None and self.gen_ai:
            span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, tokens[0])
            span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, tokens[1])
        if outcome == "unknown":
            span.set_status(Status(StatusCode.ERROR, "sent, no answer recorded"))
        span.end()

    # -- progress (gauges, items finished) --------------------------------------------------------

    def observe(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        for name, count in snapshot.finished.items():
            new = count - self.finished_seen.get(name, 0)
            if new > 0:
                kind, state = name.split(":", 1)
                self.items_counter.add(new, {"relaybatch.kind": kind, "relaybatch.state": state})
                self.finished_seen[name] = count
        self.on_update()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        stopped = self.stopped
        with self.lock:
            spans = [*self.requests.values(), *self.job_spans.values()]
            self.requests.clear()
        for span in spans:
            span.end()
        if stopped:
            self.run_span.set_attribute("relaybatch.stopped", stopped)
        self.run_span.end()
        self.on_close()

    # -- the seams --------------------------------------------------------------------------------

    def watch_spend(self, guard: SpendGuard) -> WatchedSpend:
        return WatchedSpend(guard, self)

    def watch_progress(self, progress: ProgressReporter | None) -> WatchedProgress:
        return WatchedProgress(progress, self)


def _left(snapshot: Snapshot) -> float | None:
    money = snapshot.money
    if money is None or money.budget_usd is None:
        return None
    return float(money.budget_usd - money.spent_usd - money.unknown_usd - money.reserved_usd)


def _limit(snapshot: Snapshot) -> float | None:
    return snapshot.limit_rpm


def _in_flight(snapshot: Snapshot) -> float:
    return snapshot.in_flight


def _queued(snapshot: Snapshot) -> float:
    return snapshot.queued


def _polling(snapshot: Snapshot) -> float:
    return snapshot.polling


def _rate_limited(snapshot: Snapshot) -> float:
    return snapshot.rate_limited


class WatchedSpend:
    """The run's spend guard, with a span per billed request around it (same answers, same effects)."""

    def __init__(self, inner: SpendGuard, telemetry: RunTelemetry) -> None:
        self.inner = inner
        self.telemetry = telemetry

    def reserve(self, call: BilledCall) -> bool:
        admitted = self.inner.reserve(call)
        if admitted:
            reserved_for = getattr(self.inner, "reserved_for", None)
            self.telemetry.request_started(call, reserved_for(call.key) if reserved_for else None)
        return admitted

    def sending(self, call: BilledCall) -> None:
        self.inner.sending(call)

    def settle(self, call: BilledCall, result: dict[str, Any] | None) -> Decimal | None:
        cost = self.inner.settle(call, result)
        self.telemetry.request_ended(call, "charged" if result is not None else "unknown", cost, result)
        return cost

    def release(self, call: BilledCall) -> None:
        self.inner.release(call)
        self.telemetry.request_ended(call, "not_charged", None, None)

    def commit(self) -> None:
        self.inner.commit()

    async def room_for(self, call: BilledCall) -> Refused | None:
        """The inner guard's room on the Prefect server, when it has one (engine.spend.SharedRoom)."""
        room_for = getattr(self.inner, "room_for", None)
        return None if room_for is None else await room_for(call)

    def refusal(self, call: BilledCall) -> Refused:
        return self.inner.refusal(call)

    def figures(self) -> SpendFigures:
        figures: SpendFigures = self.inner.figures()  # type: ignore[attr-defined]
        return figures


class WatchedProgress:
    """The run's progress reporter (if any), with the telemetry fed from the same snapshots."""

    def __init__(self, inner: ProgressReporter | None, telemetry: RunTelemetry) -> None:
        self.inner = inner
        self.telemetry = telemetry

    def update(self, snapshot: Snapshot) -> None:
        self.telemetry.observe(snapshot)
        if self.inner is not None:
            self.inner.update(snapshot)

    def finish(self, snapshot: Snapshot) -> None:
        # The owner closes the telemetry (after the execution): a scrape still sees the last figures.
        self.telemetry.observe(snapshot)
        self.telemetry.stopped = snapshot.stopped
        if self.inner is not None:
            self.inner.finish(snapshot)
