"""docs/emulator.md documents every config field, admin route, fault directive and shipped account."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from relaybatch.emulator.admin import routes as admin_routes
from relaybatch.emulator.config import (
    AccountConfig,
    EmulatorConfig,
    FaultRule,
    FaultsConfig,
    ModelConfig,
    ProviderConfig,
    load_config,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "emulator.md").read_text()


@pytest.mark.parametrize(
    "model", [EmulatorConfig, AccountConfig, ModelConfig, ProviderConfig, FaultsConfig, FaultRule]
)
def test_every_config_field_is_documented(model: type[BaseModel]) -> None:
    missing = [name for name in model.model_fields if not re.search(rf"[`.]{name}\b", DOC)]

    assert missing == []


def test_every_admin_route_is_documented() -> None:
    for route in admin_routes():
        assert f"`{route.path}" in DOC, route.path


@pytest.mark.parametrize("directive", ["status=", "latency=", "drop=before", "drop=after", "truncate"])
def test_every_fault_directive_is_documented(directive: str) -> None:
    assert f"`{directive}" in DOC


def test_every_shipped_account_and_key_is_documented() -> None:
    for account in load_config().accounts:
        assert f"`{account.name}`" in DOC
        for key in account.api_keys + account.revoked_keys:
            assert f"`{key}`" in DOC
