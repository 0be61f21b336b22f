"""What the emulator remembers: accounts and balances, the catalog, the clock, the request log,
the billing ledger and the fault settings. ``app.state.emulator`` is one EmulatorState.

Route modules use: ``state.clock``, ``state.models`` / ``state.model(id)``, ``state.can_use``,
``state.price_for``, ``state.can_afford`` and ``state.charge``. The middleware records every
request (``record_request``) and applies rate limits and faults, so routes never do.
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from relaybatch.emulator.clock import Clock, rfc3339
from relaybatch.emulator.config import AccountConfig, EmulatorConfig, ModelConfig
from relaybatch.emulator.errors import ErrorShape, shaped_error
from relaybatch.emulator.faults import FaultInjector
from relaybatch.emulator.prices import PriceChoice, billing_channel, choose_price
from relaybatch.emulator.ratelimit import RateLimiter

# The request log keeps every count but only this many recent entries (a benchmark sends millions).
RECENT_REQUESTS_KEPT = 10_000


@dataclass
class Account:
    """An account as it runs: its balance moves with charges and top-ups."""

    name: str
    balance: Decimal
    rate_limit_rpm: int
    models: frozenset[str] | None

    @classmethod
    def from_config(cls, config: AccountConfig) -> Account:
        allowed = frozenset(config.models) if config.models is not None else None
        return cls(config.name, config.balance_usd, config.rate_limit_rpm, allowed)


@dataclass(slots=True)
class Charge:
    account: str
    route: str
    model: str
    usd: Decimal
    usage: dict[str, Any]
    body_hash: str
    time: float

    def as_json(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "route": self.route,
            "model": self.model,
            "usd": str(self.usd),
            "usage": self.usage,
            "body_hash": self.body_hash,
            "time": rfc3339(self.time),
        }


@dataclass(slots=True)
class RequestRecord:
    method: str
    path: str
    body_hash: str
    account: str | None
    time: float


@dataclass
class RequestLog:
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    recent: deque[RequestRecord] = field(default_factory=lambda: deque(maxlen=RECENT_REQUESTS_KEPT))


def hash_body(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


async def request_body(request: Request) -> bytes:
    """The request body: as the middleware already read it, or read now."""
    body = request.scope.get("state", {}).get("body")
    return body if isinstance(body, bytes) else await request.body()


def request_body_hash(request: Request) -> str:
    """The sha256 of the request body, as the middleware computed it for the request log."""
    return str(request.scope.get("state", {}).get("body_hash") or hash_body(b""))


class EmulatorState:
    def __init__(self, config: EmulatorConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.accounts: dict[str, Account] = {a.name: Account.from_config(a) for a in config.accounts}
        self.accounts_by_key: dict[str, Account] = {
            key: self.accounts[a.name] for a in config.accounts for key in a.api_keys
        }
        self.revoked_keys: frozenset[str] = frozenset(k for a in config.accounts for k in a.revoked_keys)
        # Hidden models are not kept at all: for clients they do not exist.
        self.models: dict[str, ModelConfig] = {m.id: m for m in config.models if not m.hidden}
        self.ledger: list[Charge] = []
        self.requests = RequestLog()
        self.rate_limiter = RateLimiter()
        self.faults = FaultInjector(config.faults)
        self.request_number = 0

    # --- accounts and models ---------------------------------------------------------------
    def account_for_key(self, key: str) -> Account | None:
        return self.accounts_by_key.get(key)

    def model(self, model_id: str) -> ModelConfig | None:
        return self.models.get(model_id)

    def can_use(self, account: Account, model: ModelConfig) -> bool:
        return account.models is None or model.id in account.models

    def listed_models(self, account: Account) -> list[ModelConfig]:
        """The catalog this account sees: listed, usable models sorted by id."""
        visible = [m for m in self.models.values() if m.listed and self.can_use(account, m)]
        return sorted(visible, key=lambda m: m.id)

    # --- prices and billing ----------------------------------------------------------------
    def price_for(self, model_id: str, provider: str | None = None) -> dict[str, Any] | None:
        """The pricing object a call on this model is billed with (the pricing route's table).

        Without ``provider``: the model's billing channel (its first provider). None when the
        model is unknown or has no price.
        """
        model = self.model(model_id)
        if model is None:
            return None
        if provider is None:
            channel = billing_channel(model)
            return channel.pricing if channel else None
        choice = choose_price(model, provider)
        return choice.pricing if isinstance(choice, PriceChoice) else None

    def can_afford(self, account: Account, usd: Decimal) -> bool:
        """The 402 rule: a call whose cost is known needs balance >= cost; a call whose cost is
        not known yet (pass Decimal(0)) needs a positive balance."""
        return account.balance >= usd and account.balance > 0

    def charge(
        self,
        account: Account,
        route: str,
        model: str,
        usd: Decimal,
        usage: dict[str, Any],
        body_hash: str,
        *,
        shape: ErrorShape = ErrorShape.STANDARD,
    ) -> Response | None:
        """Debit the account and write the ledger; or, if it cannot pay, a 402 and no charge.

        Call it BEFORE producing the answer: nothing is processed for a call that gets 402.
        """
        if not self.can_afford(account, usd):
            return shaped_error(
                shape,
                402,
                f"insufficient balance: this call costs {usd} USD, the balance is {account.balance} USD",
            )
        account.balance -= usd
        self.ledger.append(Charge(account.name, route, model, usd, usage, body_hash, self.clock.now()))
        return None

    def top_up(self, account_name: str, usd: Decimal) -> Account | None:
        account = self.accounts.get(account_name)
        if account is not None:
            account.balance += usd
        return account

    # --- request log -----------------------------------------------------------------------
    def record_request(self, method: str, path: str, body_hash: str, account: str | None) -> int:
        """Log one request; returns its number (1-based, over the emulator's lifetime)."""
        self.request_number += 1
        self.requests.counts[(method, path, body_hash)] += 1
        self.requests.recent.append(RequestRecord(method, path, body_hash, account, self.clock.now()))
        return self.request_number

    @property
    def total_requests(self) -> int:
        return self.request_number

    def request_count(self, method: str, path: str, body: bytes | None = None) -> int:
        """How many requests had this method and path (and body, when given)."""
        if body is not None:
            return self.requests.counts[(method, path, hash_body(body))]
        return sum(n for (m, p, _), n in self.requests.counts.items() if (m, p) == (method, path))
