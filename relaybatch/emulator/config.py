"""The emulator's configuration file: accounts, keys, balances, limits and the model catalog."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "configs" / "emulator.yaml"


class AccountConfig(BaseModel):
    name: str
    api_keys: list[str]
    revoked_keys: list[str] = Field(default_factory=list)
    balance_usd: Decimal = Decimal("100")
    rate_limit_rpm: int = 0


class ModelConfig(BaseModel):
    id: str
    type_target: str
    created_at: str = "2026-01-01T00:00:00Z"


class EmulatorConfig(BaseModel):
    accounts: list[AccountConfig]
    models: list[ModelConfig]


def load_config(path: Path | None = None) -> EmulatorConfig:
    with open(path or DEFAULT_CONFIG_PATH, encoding="utf-8") as handle:
        return EmulatorConfig.model_validate(yaml.safe_load(handle))
