"""What the emulator remembers: accounts and balances, the catalog, the clock, the request log,
the billing ledger and the fault settings. ``app.state.emulator`` is one EmulatorState.

Route modules use: ``state.clock``, ``state.models`` / ``state.model(id)``, ``state.can_use``,
``state.price_for``, ``state.can_afford`` and ``state.charge``. The middleware records every
request (``record_request``) and applies rate limits and faults, so routes never do.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections import deque
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, overload

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
    """One billed call, as the ledger hands it out (built on reading; the ledger keeps it packed)."""

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


def _json_native(value: Any) -> bool:
    """Whether ``value`` comes back from a JSON round trip equal and of the same types."""
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_native(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_native(v) for v in value)
    return False


class Ledger(Sequence[Charge]):
    """Every charge of the emulator's lifetime, packed: about 100 bytes a charge instead of ~700.

    A served emulator keeps every charge for as long as it runs (a million-item dry run makes a
    million), so nothing here is a Python object per charge: (account, route, model) is an index
    into the distinct triples, the time a double, the body hash its 32-byte digest, and the USD
    amount (its exact decimal text) with the usage (its keys' shape, kept once, and its values as
    compact JSON) one stretch of a byte buffer.
    Reading builds Charge objects equal to what was charged: money stays Decimal, exactly.
    """

    def __init__(self) -> None:
        self._triples: list[tuple[str, str, str]] = []
        self._triple_index: dict[tuple[str, str, str], int] = {}
        self._triple_of = array("I")
        self._times = array("d")
        self._digests = bytearray()
        self._text = bytearray()  # b"<usd> <usage shape> <usage values JSON>" per charge, back to back
        self._shapes: list[tuple[str, ...]] = []
        self._shape_index: dict[tuple[str, ...], int] = {}
        self._text_ends = array("Q")
        self._odd_usage: dict[int, dict[str, Any]] = {}  # usage JSON would not give back as it was

    def append(self, charge: Charge) -> None:
        triple = (charge.account, charge.route, charge.model)
        index = self._triple_index.get(triple)
        if index is None:
            index = self._triple_index[triple] = len(self._triples)
            self._triples.append(triple)
        usage = b""
        if _json_native(charge.usage):
            # The usage's keys are the same call after call: kept once, as a shape; the values as JSON.
            shape = tuple(charge.usage)
            number = self._shape_index.get(shape)
            if number is None:
                number = self._shape_index[shape] = len(self._shapes)
                self._shapes.append(shape)
            values = json.dumps(list(charge.usage.values()), separators=(",", ":"), ensure_ascii=False)
            usage = b"%d %s" % (number, values.encode())
        else:
            self._odd_usage[len(self._times)] = charge.usage
        self._text += str(charge.usd).encode() + b" " + usage
        self._text_ends.append(len(self._text))
        self._digests += bytes.fromhex(charge.body_hash)
        self._triple_of.append(index)
        self._times.append(charge.time)

    def __len__(self) -> int:
        return len(self._times)

    @overload
    def __getitem__(self, index: int) -> Charge: ...

    @overload
    def __getitem__(self, index: slice) -> list[Charge]: ...

    def __getitem__(self, index: int | slice) -> Charge | list[Charge]:
        if isinstance(index, slice):
            return [self._charge(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("ledger index out of range")
        return self._charge(index)

    def __iter__(self) -> Iterator[Charge]:
        for index in range(len(self)):
            yield self._charge(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ledger | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ledger({list(self)!r})"

    def _charge(self, index: int) -> Charge:
        account, route, model = self._triples[self._triple_of[index]]
        start = self._text_ends[index - 1] if index else 0
        usd, _, usage = bytes(self._text[start : self._text_ends[index]]).partition(b" ")
        if usage:
            shape, _, values = usage.partition(b" ")
            found = dict(zip(self._shapes[int(shape)], json.loads(values), strict=True))
        body_hash = self._digests[32 * index : 32 * index + 32].hex()
        return Charge(
            account,
            route,
            model,
            Decimal(usd.decode()),
            found if usage else self._odd_usage[index],
            body_hash,
            self._times[index],
        )


@dataclass(slots=True)
class RequestRecord:
    method: str
    path: str
    body_hash: str
    account: str | None
    time: float
    # The answer's HTTP status, set when the answer starts (0 while the request is under way).
    status: int = 0


_EMPTY = 0  # a free slot of RequestCounts' table; a taken one holds its entry's number + 1


class RequestCounts(Mapping[tuple[str, str, str], int]):
    """How many times each distinct (method, path, body sha256 hex) came, in first-seen order.

    Reads like the Counter it replaces (a missing key counts 0) but keeps no Python object per
    distinct request, about 60 bytes each instead of ~400 (a tuple of two strings and a
    64-character hex string, plus the dict's share): per entry its full 32-byte digest (the admin
    API lists it, and callers match bodies by it exactly, so no shorter digest), the index of its
    (method, path) and its count, in arrays; found through an open-addressing table of entry
    numbers kept at most half full. A sha256 spreads the slots evenly; the (method, path) is mixed
    in, since every bodiless GET shares one digest.
    """

    def __init__(self) -> None:
        self._pairs: list[tuple[str, str]] = []
        self._pair_index: dict[tuple[str, str], int] = {}
        self._pair_totals: list[int] = []
        self._digests = bytearray()  # 32 bytes per entry
        self._pair_of = array("I")
        self._counts = array("Q")
        self._slots = array("I", bytes(4 * 1024))
        self._mask = 1024 - 1

    def add(self, method: str, path: str, body_hash: str) -> None:
        pair = (method, path)
        index = self._pair_index.get(pair)
        if index is None:
            index = self._pair_index[pair] = len(self._pairs)
            self._pairs.append(pair)
            self._pair_totals.append(0)
        self._pair_totals[index] += 1
        digest = bytes.fromhex(body_hash)
        slot = self._find(index, digest)
        entry = self._slots[slot] - 1
        if entry >= 0:
            self._counts[entry] += 1
            return
        self._slots[slot] = len(self._counts) + 1
        self._digests += digest
        self._pair_of.append(index)
        self._counts.append(1)
        if 2 * len(self._counts) > self._mask:
            self._grow()

    def _find(self, pair: int, digest: bytes) -> int:
        """The slot holding this entry, or the free slot where it belongs."""
        slots, mask, digests, pair_of = self._slots, self._mask, self._digests, self._pair_of
        slot = hash((pair, digest[:8])) & mask
        while True:
            entry = slots[slot] - 1
            if entry < 0 or (pair_of[entry] == pair and digests[32 * entry : 32 * entry + 32] == digest):
                return slot
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        size = 2 * (self._mask + 1)
        self._slots, self._mask = array("I", bytes(4 * size)), size - 1
        digests = self._digests
        for entry, pair in enumerate(self._pair_of):
            self._slots[self._find(pair, bytes(digests[32 * entry : 32 * entry + 32]))] = entry + 1

    def total(self, method: str, path: str) -> int:
        """Requests with this method and path, whatever their body."""
        index = self._pair_index.get((method, path))
        return 0 if index is None else self._pair_totals[index]

    def _entry(self, key: object) -> int | None:
        if not (isinstance(key, tuple) and len(key) == 3):
            return None
        method, path, body_hash = key
        index = self._pair_index.get((method, path))
        if index is None or not isinstance(body_hash, str) or len(body_hash) != 64:
            return None
        try:
            digest = bytes.fromhex(body_hash)
        except ValueError:
            return None
        entry = self._slots[self._find(index, digest)] - 1
        return entry if entry >= 0 else None

    def _key_of(self, entry: int) -> tuple[str, str, str]:
        method, path = self._pairs[self._pair_of[entry]]
        return method, path, self._digests[32 * entry : 32 * entry + 32].hex()

    def __getitem__(self, key: tuple[str, str, str]) -> int:
        entry = self._entry(key)
        return 0 if entry is None else self._counts[entry]

    def __contains__(self, key: object) -> bool:
        return self._entry(key) is not None

    def get(self, key: tuple[str, str, str], default: Any = None) -> Any:
        entry = self._entry(key)
        return default if entry is None else self._counts[entry]

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        for entry in range(len(self._counts)):
            yield self._key_of(entry)

    def __len__(self) -> int:
        return len(self._counts)

    def items(self) -> ItemsView[tuple[str, str, str], int]:
        return _CountItems(self)

    def values(self) -> ValuesView[int]:
        return _CountValues(self)


class _CountItems(ItemsView[tuple[str, str, str], int]):
    _mapping: RequestCounts

    def __iter__(self) -> Iterator[tuple[tuple[str, str, str], int]]:
        log = self._mapping
        for entry, count in enumerate(log._counts):
            yield log._key_of(entry), count


class _CountValues(ValuesView[int]):
    _mapping: RequestCounts

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping._counts)


@dataclass
class RequestLog:
    counts: RequestCounts = field(default_factory=RequestCounts)
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
        self.ledger = Ledger()
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
    def record_request(self, method: str, path: str, body_hash: str, account: str | None) -> RequestRecord:
        """Log one request; returns its record (the middleware sets its status when it answers)."""
        self.request_number += 1
        self.requests.counts.add(method, path, body_hash)
        record = RequestRecord(method, path, body_hash, account, self.clock.now())
        self.requests.recent.append(record)
        return record

    @property
    def total_requests(self) -> int:
        return self.request_number

    def request_count(self, method: str, path: str, body: bytes | None = None) -> int:
        """How many requests had this method and path (and body, when given)."""
        if body is not None:
            return self.requests.counts[(method, path, hash_body(body))]
        return self.requests.counts.total(method, path)
