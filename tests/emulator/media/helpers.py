"""Keys, headers and ledger helpers shared by the media conformance tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette

from relaybatch.emulator.state import EmulatorState

DEMO_KEY = "rb-demo-key"
OTHER_KEY = "rb-standard-key"  # a second account, for "another account's id" checks
EMPTY_KEY = "rb-empty-key"  # balance 0: every billed call is refused
REVOKED_KEY = "rb-revoked-key"
RESTRICTED_KEY = "rb-restricted-key"  # may call chat models only
START = 1_800_000_000.0


def bearer(key: str = DEMO_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


AppFactory = Callable[..., Starlette]


def charges(state: EmulatorState, route: str) -> list[Any]:
    return [charge for charge in state.ledger if charge.route == route]
