"""Optional metrics and traces of a run: OpenTelemetry (OTLP over HTTP) and Prometheus text.

Off by default; docs/observability.md lists the spans, attributes and metrics and how to turn
each exporter on (``RELAYBATCH_TELEMETRY__*``).

Internal modules: ``settings.py`` (``TelemetrySettings``, part of ``relaybatch.settings``: light,
imports pydantic only), ``run.py`` (the run's spans and metrics; imports the engine) and
``exporters.py`` (OpenTelemetry's SDK and exporters). Only ``TelemetrySettings`` is imported with
the package: the settings load it, and loading the settings must not load OpenTelemetry or the
engine (tests/test_lean_imports.py); the rest is imported when first used.
"""

from typing import TYPE_CHECKING, Any

from relaybatch.telemetry.settings import TelemetrySettings

if TYPE_CHECKING:
    from relaybatch.telemetry.exporters import open_telemetry
    from relaybatch.telemetry.run import RunTelemetry, WatchedProgress, WatchedSpend

__all__ = ["RunTelemetry", "TelemetrySettings", "WatchedProgress", "WatchedSpend", "open_telemetry"]


def __getattr__(name: str) -> Any:
    if name == "open_telemetry":
        from relaybatch.telemetry import exporters

        return exporters.open_telemetry
    if name in ("RunTelemetry", "WatchedProgress", "WatchedSpend"):
        from relaybatch.telemetry import run

        return getattr(run, name)
    raise AttributeError(f"module 'relaybatch.telemetry' has no attribute {name!r}")
