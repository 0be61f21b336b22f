"""Optional metrics and traces of a run: OpenTelemetry (OTLP over HTTP) and Prometheus text.

Off by default; docs/observability.md lists the spans, attributes and metrics and how to turn
each exporter on (``RELAYBATCH_TELEMETRY__*``).
"""

from relaybatch.telemetry.exporters import open_telemetry
from relaybatch.telemetry.run import RunTelemetry, WatchedProgress, WatchedSpend
from relaybatch.telemetry.settings import TelemetrySettings

__all__ = ["RunTelemetry", "TelemetrySettings", "WatchedProgress", "WatchedSpend", "open_telemetry"]
