"""Settings in one place: command-line flags > environment (RELAYBATCH_*) > defaults.

With no base URL the runner talks to the embedded emulator in-process, so the demo and the
tests need no server and no exported variables. Pointing it at the real gateway takes
``RELAYBATCH_BASE_URL`` and ``RELAYBATCH_API_KEY``. The client's timeouts, retry policy and the
route names the interface leaves open are nested settings, set field by field with a double
underscore: ``RELAYBATCH_TIMEOUTS__READ=600``, ``RELAYBATCH_RETRY__MAX_ATTEMPTS=8``,
``RELAYBATCH_ROUTES__PRICING_MAPPING_PARAMETER=platform_id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from relaybatch.errors import UserError
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.gateway.routes import RouteSettings
from relaybatch.gateway.timeouts import ClientTimeouts
from relaybatch.run_folder import RunPaths
from relaybatch.telemetry.settings import TelemetrySettings

# The key the shipped emulator configuration (configs/emulator.yaml) grants to its demo account.
EMULATOR_DEMO_KEY = "rb-demo-key"
# After the first Ctrl-C or SIGTERM, requests in flight get this long to finish (run/stopping.py):
# with 3 s to exit, the process is gone within 10 s, a common supervisor's wait before SIGKILL.
STOP_GRACE_SECONDS = 7.0
# The first part of every gateway route's path: a base URL never ends in one.
_ROUTE_PREFIXES = ("v1", "v2", "v1beta")
# Settings a command-line option sets too: an error names both.
_OPTIONS = {"RELAYBATCH_BASE_URL": "--base-url", "RELAYBATCH_RUNS_DIR": "--runs-dir"}


class Settings(BaseSettings):
    """Where the gateway is, how to authenticate, and where runs are kept."""

    model_config = SettingsConfigDict(env_prefix="RELAYBATCH_", env_nested_delimiter="__", extra="ignore")

    base_url: str | None = Field(
        default=None,
        description="Gateway base URL, e.g. https://gateway.example; unset means the embedded emulator.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="Account API key; never written to any file, log or artifact.",
    )
    runs_dir: Path = Field(
        default=Path("data/runs"),
        description="Folder that holds one sub-folder per run (checkpoint, results, ledger, report).",
    )
    emulator_config: Path | None = Field(
        default=None,
        description="Emulator configuration file for the embedded emulator; unset means the shipped default.",
    )
    progress_every_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Off a terminal (cron, CI, a log file), seconds between two progress lines of a run.",
    )
    stop_grace_seconds: float = Field(
        default=STOP_GRACE_SECONDS,
        gt=0,
        le=3600,
        description="After the first Ctrl-C or SIGTERM, seconds the requests in flight get to finish and "
        "be checkpointed; those still open are then cut off (uncertain on resume). Keep it 3 s under "
        "your supervisor's wait before SIGKILL.",
    )
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings,
        description="Optional metrics and traces: otlp_endpoint, prometheus_port, prometheus_textfile "
        "(all off by default).",
    )
    timeouts: ClientTimeouts = Field(
        default_factory=ClientTimeouts,
        description="Client timeouts in seconds: connect, read, write, pool, image_read, download_read.",
    )
    retry: RetryPolicy = Field(
        default_factory=RetryPolicy,
        description="The client's retry policy (max_attempts, base_delay, max_delay, jitter).",
    )
    routes: RouteSettings = Field(
        default_factory=RouteSettings,
        description="Converter bases and the platform-mapping parameter name, where the interface is open.",
    )

    @field_validator("base_url")
    @classmethod
    def _a_gateway_root(cls, value: str | None) -> str | None:
        """An http(s) URL with a host, the gateway's root; blank is unset (the embedded emulator)."""
        if value is None or not value.strip():
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value!r} is not an http:// or https:// URL with a host, e.g. https://gateway.example"
            )
        if parts.path.rstrip("/").rsplit("/", 1)[-1] in _ROUTE_PREFIXES:
            # An SDK's base URL (.../v1): every route would go to /v1/v1/... and answer 404.
            root = value.strip().rstrip("/").rsplit("/", 1)[0]
            raise ValueError(
                f"{value!r} ends in a route prefix; give the gateway's root ({root}): relaybatch adds "
                "/v1, /v2 or /v1beta to each route itself"
            )
        return value.strip()

    def __init__(self, **values: Any) -> None:
        """Bad values (from the environment, mostly) are a user error naming the variable, not a traceback."""
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise UserError(_settings_problems(error)) from None

    @property
    def uses_embedded_emulator(self) -> bool:
        return self.base_url is None

    def resolved_api_key(self) -> SecretStr:
        """The key to send: the configured one, or the emulator's demo key when embedded."""
        if self.api_key is not None:
            return self.api_key
        if self.uses_embedded_emulator:
            return SecretStr(EMULATOR_DEMO_KEY)
        from relaybatch.errors import UserError

        raise UserError(
            "No API key: set RELAYBATCH_API_KEY (the key from the gateway console) "
            "when RELAYBATCH_BASE_URL points at a real gateway."
        )


def _settings_problems(error: ValidationError) -> str:
    """One line per problem, named by the environment variable that sets it."""
    lines = []
    for problem in error.errors():
        name = "RELAYBATCH_" + "__".join(str(part) for part in problem["loc"]).upper()
        given = problem.get("input")
        if isinstance(given, dict):
            # A check across a nested setting's fields: name the variables that were set.
            name = ", ".join(f"{name}__{key.upper()}={value}" for key, value in given.items()) or name
        message = problem["msg"].removeprefix("Value error, ")
        if name in _OPTIONS:
            name += f" (or {_OPTIONS[name]})"
        lines.append(f"setting {name}: {message}")
    return "; ".join(lines) + " (fix or unset the variable)"


def entry_settings(*, base_url: str | None = None, runs_dir: Path | None = None) -> Settings:
    """The settings of one entry point (a command, a flow, a ``relaybatch.Run``): the options given
    over RELAYBATCH_* over the defaults. Built once there, before anything is written (a bad value
    fails first), and passed to what the entry point calls."""
    given = {"base_url": base_url, "runs_dir": runs_dir}
    return Settings(**{name: value for name, value in given.items() if value is not None})


def runs_dir_or_default(runs_dir: Path | None) -> Path:
    """The runs folder: the one given, else RELAYBATCH_RUNS_DIR, else data/runs."""
    return runs_dir if runs_dir else entry_settings().runs_dir


def run_paths(runs_dir: Path | None, name: str) -> RunPaths:
    return RunPaths.for_run(runs_dir_or_default(runs_dir), name)
