"""Fault injection: which fault (if any) hits a request, from its header or the configured rules.

Fault syntax (header ``x-emulator-fault`` and config rules alike): directives separated by ``;``
or ``,``: ``status=500|429|529|...`` (answer that error without processing), ``latency=0.3``
(seconds added before processing), ``drop=before`` (connection broken, nothing processed),
``drop=after`` (processed and charged, then the connection breaks), ``truncate`` (a complete HTTP
answer whose body is cut in half), ``invalid_json`` (a structured text answer is processed and
charged as usual, but its JSON is broken or breaks the request's schema: text/structured.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

from relaybatch.emulator.config import FaultRule, FaultsConfig

FAULT_HEADER = "x-emulator-fault"
# The request-state key the middleware sets when the invalid_json fault hits a request.
INVALID_JSON = "invalid_json"


class FaultSyntaxError(ValueError):
    pass


class DroppedConnection(httpx.RemoteProtocolError):
    """Raised by the emulator to break a connection.

    Over uvicorn the server closes the socket, and the client's httpx raises RemoteProtocolError;
    in-process, httpx.ASGITransport re-raises this very exception, which is the same class. So a
    client sees an httpx transport error both ways.
    """


@dataclass(frozen=True)
class Fault:
    status: int | None = None
    latency: float = 0.0
    drop: str | None = None  # "before" | "after"
    truncate: bool = False
    invalid_json: bool = False


def parse_fault(text: str) -> Fault:
    status: int | None = None
    latency = 0.0
    drop: str | None = None
    truncate = invalid_json = False
    for directive in text.replace(",", ";").split(";"):
        name, _, value = directive.strip().partition("=")
        name, value = name.strip().lower(), value.strip().lower()
        if not name:
            continue
        try:
            if name == "status":
                status = int(value)
                if not 400 <= status <= 599:
                    raise FaultSyntaxError(f"fault status must be 400-599, got {status}")
            elif name == "latency":
                latency = float(value)
                if latency < 0:
                    raise FaultSyntaxError("fault latency must not be negative")
            elif name == "drop":
                if value not in ("before", "after"):
                    raise FaultSyntaxError("drop must be 'before' or 'after'")
                drop = value
            elif name == "truncate":
                truncate = True
            elif name == "invalid_json":
                invalid_json = True
            else:
                raise FaultSyntaxError(f"unknown fault directive '{name}'")
        except ValueError as error:
            if isinstance(error, FaultSyntaxError):
                raise
            raise FaultSyntaxError(f"fault directive '{directive.strip()}' has a bad value") from None
    return Fault(status, latency, drop, truncate, invalid_json)


class FaultInjector:
    """Chooses faults: the request header first, then the first configured rule that fires."""

    def __init__(self, config: FaultsConfig) -> None:
        self.replace(config)

    def replace(self, config: FaultsConfig) -> None:
        for rule in config.rules:
            parse_fault(rule.fault)  # reject a bad rule now, not on the request it would hit
        self.config = config
        self._random = random.Random(config.seed)
        self._matched = [0] * len(config.rules)

    @property
    def rules(self) -> list[FaultRule]:
        return self.config.rules

    def pick(self, header: str | None, path: str) -> Fault | None:
        """The fault for this request; raises FaultSyntaxError for a bad header."""
        if header:
            return parse_fault(header)
        for index, rule in enumerate(self.config.rules):
            if rule.paths and not path.startswith(tuple(rule.paths)):
                continue
            self._matched[index] += 1
            number = self._matched[index]
            fires = (
                number in rule.at
                or (rule.every > 0 and number % rule.every == 0)
                or (rule.rate > 0 and self._random.random() < rule.rate)
            )
            if fires:
                return parse_fault(rule.fault)
        return None
