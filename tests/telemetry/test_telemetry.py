"""Telemetry: spans per run, job and request and the run's metrics, read back from the SDK's
in-memory exporters, a scraped Prometheus endpoint, a textfile and a local OTLP/HTTP receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from relaybatch.emulator import create_app, load_config
from relaybatch.engine import AdaptiveTokenBucket, CheckpointStore
from relaybatch.manifests import Item
from relaybatch.settings import Settings
from relaybatch.telemetry import RunTelemetry, TelemetrySettings, open_telemetry
from tests.engine.engine_fakes import FAST as ENGINE_FAST
from tests.engine.engine_fakes import FAST_MEDIA, execute_with_a_budget

FAST = replace(ENGINE_FAST, concurrency=4)


def items() -> list[Item]:
    chats = [
        Item.build(
            item_id=f"ask-{n}",
            job="ask",
            kind="chat",
            request={
                "model": "relay-chat-small",
                "messages": [{"role": "user", "content": f"question {n}"}],
                "max_tokens": 16,
            },
        )
        for n in (1, 2, 3)
    ]
    clip = Item.build(
        item_id="clip-1",
        job="clips",
        kind="video",
        request={
            "model": "relay-video-2",
            "prompt": "a lighthouse at dusk",
            "seconds": "4",
            "size": "1280x720",
        },
    )
    return [*chats, clip]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    with CheckpointStore(tmp_path / "demo" / "checkpoint.sqlite") as checkpoint:
        checkpoint.add_items(items())
        yield checkpoint


async def run_with(store: CheckpointStore, telemetry: RunTelemetry, *, standard_rpm: int = 120) -> None:
    """A run as the standard account, whose limit (the shipped 120 rpm) the limit metrics report.
    Tests that do not read the limit raise it (``standard_rpm``): at two requests a second the
    run's creates, polls and download took some 3 s."""
    config = load_config()
    config.media = FAST_MEDIA
    (standard,) = [account for account in config.accounts if "rb-standard-key" in account.api_keys]
    standard.rate_limit_rpm = standard_rpm
    await execute_with_a_budget(
        store,
        create_app(config),
        AdaptiveTokenBucket(600),
        telemetry.watch_progress(None),
        telemetry.watch_spend,
        FAST,
    )


def in_memory() -> tuple[RunTelemetry, InMemorySpanExporter, InMemoryMetricReader]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    return RunTelemetry("demo", tracer_provider, MeterProvider(metric_readers=[metrics])), spans, metrics


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_spans_per_run_job_and_request_with_our_attributes(store: CheckpointStore) -> None:
    telemetry, exporter, _ = in_memory()

    await run_with(store, telemetry, standard_rpm=6000)
    telemetry.close()

    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (run,) = by_name["relaybatch.run"]
    jobs = {span.attributes["relaybatch.job"]: span for span in by_name["relaybatch.job"]}
    assert set(jobs) == {"ask", "clips"}
    assert all(span.parent.span_id == run.context.span_id for span in jobs.values())
    requests = by_name["relaybatch.request"]
    assert len(requests) == 4
    for span in requests:
        attributes = dict(span.attributes)
        job = jobs[attributes["relaybatch.job"]]
        assert span.parent.span_id == job.context.span_id
        assert attributes["relaybatch.outcome"] == "charged"
        assert attributes["relaybatch.attempt"] == 1
        assert len(attributes["relaybatch.item.key"]) > 8 and attributes["relaybatch.item.id"]
        assert Decimal(attributes["relaybatch.cost_usd"]) > 0
        assert Decimal(attributes["relaybatch.reservation_usd"]) >= Decimal(attributes["relaybatch.cost_usd"])
        # The GenAI conventions are in development: their names only with their opt-in.
        assert not [name for name in attributes if name.startswith("gen_ai.")]


async def test_gen_ai_attributes_follow_the_conventions_opt_in(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental")
    telemetry, exporter, metrics = in_memory()

    await run_with(store, telemetry, standard_rpm=6000)
    telemetry.close()

    chats = [
        dict(span.attributes)
        for span in exporter.get_finished_spans()
        if span.name == "relaybatch.request" and span.attributes["relaybatch.kind"] == "chat"
    ]
    assert len(chats) == 3
    for attributes in chats:
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == "relay-chat-small"
        assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
    usage = points(metrics)["gen_ai.client.token.usage"]
    assert {point.attributes["gen_ai.token.type"] for point in usage} == {"input", "output"}


async def test_metrics_for_requests_tokens_cost_budget_limit_and_load(store: CheckpointStore) -> None:
    telemetry, _, metrics = in_memory()

    await run_with(store, telemetry)
    found = points(metrics)
    telemetry.close()

    requests = {
        (p.attributes["relaybatch.outcome"], p.attributes["relaybatch.kind"]): p.value
        for p in found["relaybatch.requests"]
    }
    assert requests == {("charged", "chat"): 3, ("charged", "video"): 1}
    finished = {
        (p.attributes["relaybatch.kind"], p.attributes["relaybatch.state"]): p.value
        for p in found["relaybatch.items.finished"]
    }
    assert finished == {("chat", "done"): 3, ("video", "done"): 1}
    tokens = {p.attributes["relaybatch.token.type"]: 0 for p in found["relaybatch.tokens"]}
    for p in found["relaybatch.tokens"]:
        tokens[p.attributes["relaybatch.token.type"]] += p.value
    assert tokens["input"] > 0 and tokens["output"] > 0
    cost = sum(p.value for p in found["relaybatch.cost"])
    assert 0 < cost < 5
    (left,) = found["relaybatch.budget.remaining"]
    assert left.value == pytest.approx(5 - cost)
    (limit,) = found["relaybatch.limiter.limit"]
    assert limit.value == pytest.approx(120.0)  # the standard account's 120 rpm, learned from headers
    for gauge in ("relaybatch.requests.in_flight", "relaybatch.queue.depth", "relaybatch.polling"):
        assert [p.value for p in found[gauge]] == [0], gauge  # the run is over
    assert [p.value for p in found["relaybatch.rate_limited"]] == [0]


async def test_a_prometheus_endpoint_serves_the_metrics_while_the_run_is_open(
    store: CheckpointStore, tmp_path: Path
) -> None:
    textfile = tmp_path / "textfile" / "relaybatch.prom"
    telemetry = open_telemetry("demo", TelemetrySettings(prometheus_port=0, prometheus_textfile=textfile))
    assert telemetry is not None and telemetry.prometheus_port
    try:
        await run_with(store, telemetry)
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"http://127.0.0.1:{telemetry.prometheus_port}/metrics")
    finally:
        telemetry.close()

    assert answer.status_code == 200
    scraped = samples(answer.text)
    assert scraped[("relaybatch_requests_total", "chat", "charged")] == 3
    assert scraped[("relaybatch_requests_total", "video", "charged")] == 1
    assert scraped[("relaybatch_limiter_limit_per_min", None, None)] == pytest.approx(120.0)
    assert 0 < scraped[("relaybatch_budget_remaining_USD", None, None)] < 5
    assert scraped[("relaybatch_requests_in_flight", None, None)] == 0
    assert scraped[("relaybatch_queue_depth", None, None)] == 0
    # The file for node_exporter's textfile collector holds the same figures.
    assert samples(textfile.read_text())[("relaybatch_requests_total", "video", "charged")] == 1
    with pytest.raises(httpx.ConnectError):  # closed with the run: nothing left listening
        httpx.get(f"http://127.0.0.1:{telemetry.prometheus_port}/metrics", timeout=2)


def samples(text: str) -> dict[tuple[str, str | None, str | None], float]:
    """Prometheus text, parsed by prometheus_client: (name, kind, outcome) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            key = (sample.name, labels.get("relaybatch_kind"), labels.get("relaybatch_outcome"))
            found[key] = sample.value
    return found


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        _Collector.received.append((self.path, self.headers.get("content-type") or ""))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


async def test_otlp_over_http_sends_traces_and_metrics_to_the_collector(store: CheckpointStore) -> None:
    _Collector.received = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        telemetry = open_telemetry("demo", TelemetrySettings(otlp_endpoint=endpoint))
        assert telemetry is not None
        await run_with(store, telemetry, standard_rpm=6000)
        telemetry.close()  # flushes the spans and the last metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    paths = {path for path, _ in _Collector.received}
    assert {"/v1/traces", "/v1/metrics"} <= paths
    assert all(kind == "application/x-protobuf" for _, kind in _Collector.received)


def test_off_by_default_and_set_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not Settings().telemetry.enabled
    assert open_telemetry("demo", Settings().telemetry) is None
    monkeypatch.setenv("RELAYBATCH_TELEMETRY__PROMETHEUS_TEXTFILE", "/tmp/relaybatch.prom")
    monkeypatch.setenv("RELAYBATCH_TELEMETRY__OTLP_ENDPOINT", "http://127.0.0.1:4318")
    configured = Settings().telemetry
    assert configured.enabled and configured.otlp_endpoint == "http://127.0.0.1:4318"
    assert configured.prometheus_textfile == Path("/tmp/relaybatch.prom")


def test_relaybatch_run_writes_the_textfile_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from relaybatch.cli import app

    textfile = tmp_path / "relaybatch.prom"
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo.csv"
    monkeypatch.setenv("RELAYBATCH_TELEMETRY__PROMETHEUS_TEXTFILE", str(textfile))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)

    result = CliRunner().invoke(app, ["run", str(demo), "--runs-dir", str(tmp_path / "runs")])

    assert result.exit_code == 0, result.output
    scraped = samples(textfile.read_text())
    assert scraped[("relaybatch_requests_total", "chat", "charged")] == 3
