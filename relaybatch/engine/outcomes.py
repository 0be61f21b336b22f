"""What the engine does with each gateway error: retry later, fail, or stop (DESIGN invariant 4).

429, 529, 5xx and connection failures retry (the wait comes from
``relaybatch.gateway.retry.retry_delay``: the server's wait first, else capped exponential
back-off with jitter); 400, 403, 404, 409 fail with the reason; 402 stops new billed work; 401
stops the run; an unknown outcome of a billed create makes the item ``uncertain``.
"""

from __future__ import annotations

from enum import Enum

from relaybatch.gateway import (
    APIStatusError,
    AuthenticationFailed,
    GatewayError,
    InsufficientBalance,
    OutcomeUnknown,
    Overloaded,
    RateLimited,
    ServerError,
    TransportError,
)


class Verdict(Enum):
    RETRY = "retry"
    FAIL = "fail"
    UNCERTAIN = "uncertain"
    STOP_BILLING = "stop_billing"
    STOP_RUN = "stop_run"


STOP_BILLING_MESSAGE = (
    "the gateway answered 402 (insufficient balance): no new billed work was sent after it; paid "
    "work in progress was polled to the end. Top up the balance in the console, then run the "
    "same manifest again to resume."
)
STOP_RUN_MESSAGE = (
    "the gateway answered 401 (the API key was rejected): the run stopped. Check RELAYBATCH_API_KEY, "
    "then run the same manifest again to resume."
)


def verdict_for(error: GatewayError) -> Verdict:
    if isinstance(error, OutcomeUnknown):
        return Verdict.UNCERTAIN
    if isinstance(error, AuthenticationFailed):
        return Verdict.STOP_RUN
    if isinstance(error, InsufficientBalance):
        return Verdict.STOP_BILLING
    if isinstance(error, RateLimited | Overloaded | ServerError | TransportError):
        return Verdict.RETRY
    if isinstance(error, APIStatusError) and error.status in (408, 500, 502, 503, 504):
        return Verdict.RETRY
    return Verdict.FAIL
