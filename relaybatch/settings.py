"""Settings in one place: command-line flags > environment (RELAYBATCH_*) > defaults.

With no base URL the runner talks to the embedded emulator in-process, so the demo and the
tests need no server and no exported variables. Pointing it at the real gateway takes
``RELAYBATCH_BASE_URL`` and ``RELAYBATCH_API_KEY``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

# The key the shipped emulator configuration (configs/emulator.yaml) grants to its demo account.
EMULATOR_DEMO_KEY = "rb-demo-key"


class Settings(BaseSettings):
    """Where the gateway is, how to authenticate, and where runs are kept."""

    model_config = SettingsConfigDict(env_prefix="RELAYBATCH_", extra="ignore")

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
