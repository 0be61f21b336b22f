"""The emulator's configuration file: accounts, the model catalog with its prices, faults, media timings.

The file is YAML validated by these pydantic models; `relaybatch emulator serve --config FILE` and
`load_config(path)` read it, and configs/emulator.yaml is the documented default. That folder
ships inside the package as ``relaybatch.configs``, so the default is found from a checkout and
from an installed wheel alike.
"""

from __future__ import annotations

from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from relaybatch.errors import UserError

DEFAULT_CONFIG_PATH = Path(str(resources.files("relaybatch.configs").joinpath("emulator.yaml")))

TypeTarget = Literal["openai", "anthropic", "gemini"]
# What a model does decides which routes accept it; "chat" models answer the four text formats.
ModelKind = Literal["chat", "image", "video", "video_v1", "audio_v1", "judgment", "search"]


class AccountConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    api_keys: list[str]
    revoked_keys: list[str] = Field(default_factory=list)
    balance_usd: Decimal = Decimal("100")
    # Requests per minute over all routes, polls included; 0 means no limit.
    rate_limit_rpm: int = Field(default=0, ge=0)
    # Model ids this account may see and call; None means every listed (and unlisted) model.
    models: list[str] | None = None


class ProviderConfig(BaseModel):
    """One upstream channel of a model: its provider name, platform mapping id and price."""

    model_config = ConfigDict(extra="forbid")

    name: str
    mapping_id: int
    # The pricing object exactly as GET /v1/models/pricing returns it (decimal strings).
    pricing: dict[str, Any]


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    type_target: TypeTarget
    kind: ModelKind = "chat"
    created_at: str = "2026-01-01T00:00:00Z"
    display_name: str | None = None
    # Hidden models do not exist for clients (listing, pricing and calls all say unknown);
    # unlisted models are left out of GET /v1/models but can be priced and called by id.
    hidden: bool = False
    listed: bool = True
    providers: list[ProviderConfig] = Field(default_factory=list)
    # Deterministic usage behaviour (docs/emulator.md, "Usage rules").
    reasoning: bool = False
    cache: bool = False
    # Free-form per-model options for media routes (sizes, qualities, durations); part B reads them.
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("providers")
    @classmethod
    def _unique_providers(cls, providers: list[ProviderConfig]) -> list[ProviderConfig]:
        names = [provider.name for provider in providers]
        if len(names) != len(set(names)):
            raise ValueError("provider names must be unique per model")
        return providers


class FaultRule(BaseModel):
    """A fault injected into matching requests: at a rate, every Nth request, or at given numbers."""

    model_config = ConfigDict(extra="forbid")

    # Same syntax as the x-emulator-fault header, e.g. "status=529" or "latency=0.2; status=500".
    fault: str
    rate: float = Field(default=0.0, ge=0.0, le=1.0)
    every: int = Field(default=0, ge=0)
    at: list[int] = Field(default_factory=list)
    # Only requests whose path starts with one of these prefixes; empty means all routes.
    paths: list[str] = Field(default_factory=list)


class FaultsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    rules: list[FaultRule] = Field(default_factory=list)


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accounts: list[AccountConfig]
    models: list[ModelConfig]
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    # The rate reported in a 429's error.rate_limit when the account itself has no limit.
    fallback_rate_limit_rpm: int = 120
    # Settings of the media routes (padding timings, video durations); their owner parses them.
    media: dict[str, Any] = Field(default_factory=dict)


def load_config(path: Path | None = None) -> EmulatorConfig:
    """Read and validate an emulator config; bad files raise UserError naming the file and field."""
    config_path = path or DEFAULT_CONFIG_PATH
    try:
        with open(config_path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except OSError as error:
        raise UserError(f"{config_path}: cannot read emulator config ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise UserError(f"{config_path}: not valid YAML ({error})") from None
    try:
        return EmulatorConfig.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{config_path}: {where}: {first['msg']}") from None
