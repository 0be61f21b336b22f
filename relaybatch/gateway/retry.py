"""The retry policy as a few pure functions: what may be retried, and how long to wait first.

Three kinds of call differ in what a repeat can cost:

* ``READ``: catalog, pricing, polls, deletes, content downloads. Repeating costs nothing, so
  every retryable failure is retried.
* ``BILLED``: chat in all four families, typed judgment, web search. An error answer is not
  billed, so 429 / 529 / 5xx answers are retried; a request that got *no* answer after it may have
  reached the gateway is only resent when ``RetryPolicy.resend_unanswered_billed`` says so (off by
  default: the engine decides, and records the item as uncertain).
* ``BILLED_CREATE``: V2 video create, legacy V1 media create, image generation. A repeat may be a
  second charge for a second artefact, so once the request may have reached the gateway nothing is
  retried except a 429 (the rate limit is checked before any work starts); every other failure
  becomes ``OutcomeUnknown``.

A connection that was never made (nothing sent) is safe to retry for every kind.

``read_server_hints`` is the one reader of the headers that say how long to wait
(``retry-after-ms``, ``Retry-After``, ``x-ratelimit-*-requests``): the client, the shared limiter
(engine/limiter.py) and the engine's item retries all use it, and ``retry_delay`` is the one wait.
In a run the engine owns the retries and the client tries once (``GatewayClient.with_retry``), so
``RetryPolicy.max_attempts`` is the one attempt budget per item per execution (docs/engine.md).
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

# Statuses the interface calls retryable (429, 529) plus the server-side errors.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
# Never retried whatever the body says: the same request would fail the same way.
NEVER_RETRY_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 409, 422})
# A server wait longer than this is an outage, not a back-off: we wait this long and ask again.
MAX_SERVER_WAIT_SECONDS = 120.0
# The documented bound on lengthening a server-given wait: at most 10 % of it, never more than 1 s.
SERVER_WAIT_SPREAD = 0.1
MAX_SERVER_WAIT_SPREAD_SECONDS = 1.0


class CallKind(Enum):
    READ = "read"
    BILLED = "billed"
    BILLED_CREATE = "billed_create"


@dataclass(frozen=True)
class RetryPolicy:
    """How persistent the client is; every field is a setting, the defaults suit a batch run."""

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 60.0
    jitter: float = 0.25
    resend_unanswered_billed: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")


def status_is_retryable(status: int) -> bool:
    if status in NEVER_RETRY_STATUSES:
        return False
    return status in RETRYABLE_STATUSES or status >= 500


def may_retry_status(kind: CallKind, status: int) -> bool:
    """Whether an error answer with this status may be retried for this kind of call."""
    if not status_is_retryable(status):
        return False
    if kind is CallKind.BILLED_CREATE:
        return status == 429
    return True


def may_retry_unanswered(kind: CallKind, *, never_sent: bool, policy: RetryPolicy) -> bool:
    """Whether a request that got no answer (connect error, timeout, drop) may be resent."""
    if never_sent or kind is CallKind.READ:
        return True
    if kind is CallKind.BILLED:
        return policy.resend_unanswered_billed
    return False


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | None) -> float | None:
    """Seconds from ``"2"``, ``"0.5"``, ``"250ms"``, ``"1s"``, ``"1m30s"`` or ``"1h"``; None if unreadable."""
    if text is None:
        return None
    text = text.strip().lower()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # plain dicts in tests are case-sensitive; httpx.Headers are not
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def _number(headers: Mapping[str, str], name: str) -> float | None:
    try:
        return float(_header(headers, name) or "")
    except ValueError:
        return None


@dataclass(frozen=True)
class ServerHints:
    """What one answer's headers say about waiting and about the request limit.

    ``read_server_hints`` is the only reader of these headers: the client's retries, the shared
    limiter and the engine's retries all take their numbers from it, so a header means the same
    thing everywhere.
    """

    retry_after: float | None = None  # retry-after-ms, else Retry-After (seconds or HTTP date)
    limit_requests: float | None = None  # x-ratelimit-limit-requests, per minute
    remaining_requests: float | None = None  # x-ratelimit-remaining-requests
    reset_requests: float | None = None  # x-ratelimit-reset-requests, in seconds

    @property
    def window_spent(self) -> bool:
        """No request remains in the window (or the count is not given)."""
        return not self.remaining_requests or self.remaining_requests <= 0

    def wait(self) -> float | None:
        """The server's wait in seconds, uncapped: the shorter of its retry-after and, when the
        window is spent, the window's reset (a 429 saying requests remain was not the window's,
        and its reset, up to 60 s on a sliding window, would be a needless wait)."""
        reset = self.reset_requests if self.window_spent else None
        waits = [wait for wait in (self.retry_after, reset) if wait is not None]
        return min(waits) if waits else None


def read_server_hints(headers: Mapping[str, str], now: float | None = None) -> ServerHints:
    """Read ``retry-after-ms``, ``Retry-After`` and the ``x-ratelimit-*-requests`` headers once."""
    retry_after = None
    milliseconds = _number(headers, "retry-after-ms")
    if milliseconds is not None:
        retry_after = max(0.0, milliseconds / 1000.0)
    else:
        after = _header(headers, "retry-after")
        if after is not None:
            retry_after = _parse_retry_after(after, time.time() if now is None else now)
    limit = _number(headers, "x-ratelimit-limit-requests")
    return ServerHints(
        retry_after=retry_after,
        limit_requests=limit if limit is not None and limit > 0 else None,
        remaining_requests=_number(headers, "x-ratelimit-remaining-requests"),
        reset_requests=parse_duration(_header(headers, "x-ratelimit-reset-requests")),
    )


def _parse_retry_after(value: str, now: float) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value) if value.strip() else None
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - now) if parsed is not None else None


def backoff_delay(attempt: int, policy: RetryPolicy, random_fraction: float) -> float:
    """Capped exponential back-off before retry number ``attempt`` (1 = first retry), with jitter.

    ``random_fraction`` in [0, 1) comes from the caller so the function stays pure; jitter only
    shortens the wait, so concurrent workers that failed together spread out instead of retrying
    in step.
    """
    delay = min(policy.base_delay * 2 ** (attempt - 1), policy.max_delay)
    return delay * (1 - policy.jitter * random_fraction)


def server_wait(hints: ServerHints, random_fraction: float) -> float | None:
    """The server's wait as we keep it: capped at ``MAX_SERVER_WAIT_SECONDS``, then lengthened by
    at most ``SERVER_WAIT_SPREAD`` of itself and never by more than ``MAX_SERVER_WAIT_SPREAD_SECONDS``,
    so requests refused together do not all come back in the same instant."""
    wait = hints.wait()
    if wait is None:
        return None
    wait = min(wait, MAX_SERVER_WAIT_SECONDS)
    return wait + min(wait * SERVER_WAIT_SPREAD, MAX_SERVER_WAIT_SPREAD_SECONDS) * random_fraction


def retry_delay(
    attempt: int,
    policy: RetryPolicy,
    headers: Mapping[str, str],
    random_fraction: float,
    now: float | None = None,
) -> float:
    """How long to wait before retry ``attempt``: the server's wait when it gives one, else our back-off."""
    wait = server_wait(read_server_hints(headers, now), random_fraction)
    return backoff_delay(attempt, policy, random_fraction) if wait is None else wait


def parse_rate_limit_headers(headers: Mapping[str, str]) -> dict[str, float]:
    """``x-ratelimit-limit-requests`` / ``-remaining-requests`` as numbers, ``-reset-requests`` in s."""
    hints = read_server_hints(headers)
    found = {
        "limit_requests": hints.limit_requests,
        "remaining_requests": hints.remaining_requests,
        "reset_requests_seconds": hints.reset_requests,
    }
    return {key: value for key, value in found.items() if value is not None}
