"""Where a run's traces and metrics go; everything is off until one of these is set."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class TelemetrySettings(BaseModel):
    """``RELAYBATCH_TELEMETRY__<FIELD>``; unset fields export nothing."""

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector base URL (e.g. http://127.0.0.1:4318): spans to /v1/traces, "
        "metrics to /v1/metrics. Unset: no export.",
    )
    otlp_interval_seconds: float = Field(
        default=10.0, gt=0, description="Seconds between two OTLP metric exports."
    )
    prometheus_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve the run's metrics as Prometheus text on http://HOST:PORT/metrics while it "
        "executes (0: any free port). Unset: no endpoint.",
    )
    prometheus_host: str = Field(
        default="127.0.0.1", description="Address the Prometheus endpoint listens on."
    )
    prometheus_textfile: Path | None = Field(
        default=None,
        description="Write the metrics as Prometheus text to this file (node_exporter's textfile "
        "collector) every few seconds and at the end. Unset: no file.",
    )

    @property
    def enabled(self) -> bool:
        return (
            bool(self.otlp_endpoint)
            or self.prometheus_port is not None
            or self.prometheus_textfile is not None
        )
