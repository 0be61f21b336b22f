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
# A server hint longer than this is not a back-off but an outage; fall back to our own schedule.
MAX_HONOURED_HINT_SECONDS = 120.0


class CallKind(Enum):
    READ = "read"
    BILLED = "billed"
    BILLED_CREATE = "billed_create"


@dataclass(frozen=True)
class RetryPolicy:
    """How persistent the client is; every field is a setting, the defaults suit a batch run."""

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
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


def parse_duration(text: str) -> float | None:
    """Seconds from ``"2"``, ``"0.5"``, ``"250ms"``, ``"1s"``, ``"1m30s"`` or ``"1h"``; None if unreadable."""
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
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def retry_after_hint(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The server's wait hint in seconds: ``retry-after-ms``, then ``Retry-After``, then the reset
    when no requests remain (or the count is not given)."""
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    after = _header(headers, "retry-after")
    if after is not None:
        seconds = _parse_retry_after(after, time.time() if now is None else now)
        if seconds is not None:
            return seconds
    # The window's reset is a wait only when the window is spent: a 429 saying requests remain was
    # not the window's, and its reset (up to 60 s on a sliding window) would be a needless wait.
    remaining = parse_duration(_header(headers, "x-ratelimit-remaining-requests") or "")
    reset = _header(headers, "x-ratelimit-reset-requests")
    return parse_duration(reset) if reset is not None and not remaining else None


def _parse_retry_after(value: str, now: float) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_to_datetime(value) if value.strip() else None
    return max(0.0, parsed.timestamp() - now) if parsed is not None else None


def backoff_delay(attempt: int, policy: RetryPolicy, random_fraction: float) -> float:
    """Capped exponential back-off before retry number ``attempt`` (1 = first retry), with jitter.

    ``random_fraction`` in [0, 1) comes from the caller so the function stays pure; jitter only
    shortens the wait, so concurrent workers that failed together spread out instead of retrying
    in step.
    """
    delay = min(policy.base_delay * 2 ** (attempt - 1), policy.max_delay)
    return delay * (1 - policy.jitter * random_fraction)


def retry_delay(
    attempt: int,
    policy: RetryPolicy,
    headers: Mapping[str, str],
    random_fraction: float,
    now: float | None = None,
) -> float:
    """How long to wait before retry ``attempt``: the server's hint when sane, else our back-off."""
    hint = retry_after_hint(headers, now)
    if hint is not None and hint <= MAX_HONOURED_HINT_SECONDS:
        return hint
    return backoff_delay(attempt, policy, random_fraction)


def parse_rate_limit_headers(headers: Mapping[str, str]) -> dict[str, float]:
    """``x-ratelimit-limit-requests`` / ``-remaining-requests`` as numbers, ``-reset-requests`` in s."""
    found: dict[str, float] = {}
    for name, key in (
        ("x-ratelimit-limit-requests", "limit_requests"),
        ("x-ratelimit-remaining-requests", "remaining_requests"),
        ("x-ratelimit-reset-requests", "reset_requests_seconds"),
    ):
        raw = _header(headers, name)
        value = parse_duration(raw) if raw is not None else None
        if value is not None:
            found[key] = value
    return found
