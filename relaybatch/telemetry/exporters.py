"""The exporters a run's telemetry goes to: OTLP over HTTP, a Prometheus endpoint, a Prometheus textfile.

Each run builds its own tracer and meter providers (never the process-wide globals), so a library
user's own OpenTelemetry set-up is left alone and two runs in one process do not mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from relaybatch.telemetry.run import RunTelemetry
from relaybatch.telemetry.settings import TelemetrySettings

# The textfile is rewritten at most this often (and once at the end): node_exporter reads it
# on its own schedule, so more often is wasted I/O.
TEXTFILE_EVERY_SECONDS = 5.0


def open_telemetry(run: str, settings: TelemetrySettings) -> RunTelemetry | None:
    """The run's telemetry, or None when no exporter is configured (the default)."""
    if not settings.enabled:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": "relaybatch", "relaybatch.run": run})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    closers: list[Callable[[], None]] = []
    if settings.otlp_endpoint:
        readers.append(_otlp(tracer_provider, settings))
    write_textfile: Callable[[], None] = lambda: None  # noqa: E731
    port: int | None = None
    if settings.prometheus_port is not None or settings.prometheus_textfile is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry()
        readers.append(PrometheusMetricReader(registry=registry))
        if settings.prometheus_port is not None:
            port, stop = _serve(registry, settings.prometheus_host, settings.prometheus_port)
            closers.append(stop)
        if settings.prometheus_textfile is not None:
            write_textfile = _textfile_writer(registry, settings)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)

    def close() -> None:
        write_textfile()
        tracer_provider.shutdown()  # ends with a flush of the spans still queued
        meter_provider.shutdown()
        for stop in closers:
            stop()

    telemetry = RunTelemetry(
        run, tracer_provider, meter_provider, on_update=_throttled(write_textfile), on_close=close
    )
    telemetry.prometheus_port = port
    return telemetry


def _otlp(tracer_provider: Any, settings: TelemetrySettings) -> Any:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    base = str(settings.otlp_endpoint).rstrip("/")
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
    return PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
        export_interval_millis=settings.otlp_interval_seconds * 1000,
    )


def _serve(registry: Any, host: str, port: int) -> tuple[int, Callable[[], None]]:
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return int(server.server_address[1]), stop


def _textfile_writer(registry: Any, settings: TelemetrySettings) -> Callable[[], None]:
    from prometheus_client import write_to_textfile

    path = settings.prometheus_textfile
    assert path is not None

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), registry)  # a temporary file renamed into place

    return write


def _throttled(action: Callable[[], None], every: float = TEXTFILE_EVERY_SECONDS) -> Callable[[], None]:
    last = [-float("inf")]

    def maybe() -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            action()

    return maybe
