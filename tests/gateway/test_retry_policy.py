"""The retry policy's pure functions: what is retried, and how long the client waits first."""

from __future__ import annotations

import email.utils

import pytest

from relaybatch.gateway.retry import (
    MAX_SERVER_WAIT_SECONDS,
    CallKind,
    RetryPolicy,
    backoff_delay,
    may_retry_status,
    may_retry_unanswered,
    parse_duration,
    parse_rate_limit_headers,
    read_server_hints,
    retry_delay,
)


def retry_after_hint(headers: dict[str, str], now: float | None = None) -> float | None:
    return read_server_hints(headers, now).wait()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2", 2.0), ("0.5", 0.5), ("250ms", 0.25), ("1s", 1.0), ("1m30s", 90.0), ("1h", 3600.0), ("1.5s", 1.5)],
)
def test_durations_in_every_documented_form(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s1", "1s garbage"])
def test_unreadable_durations_are_none(text: str) -> None:
    assert parse_duration(text) is None


def test_retry_after_ms_wins_over_retry_after_and_reset() -> None:
    headers = {"retry-after-ms": "1500", "retry-after": "9", "x-ratelimit-reset-requests": "20s"}
    assert retry_after_hint(headers) == 1.5


def test_retry_after_seconds_then_http_date() -> None:
    assert retry_after_hint({"Retry-After": "3"}) == 3.0
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry_after_hint({"retry-after": date}, now=1_000_000) == pytest.approx(10.0)


def test_ratelimit_reset_is_the_last_hint() -> None:
    assert retry_after_hint({"x-ratelimit-reset-requests": "1m30s"}) == 90.0
    assert retry_after_hint({}) is None


def test_backoff_doubles_and_stops_at_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=0.25)
    assert [backoff_delay(n, policy, 0.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_only_shortens_the_wait() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, jitter=0.25)
    assert backoff_delay(1, policy, 0.999) == pytest.approx(0.75025)
    assert backoff_delay(1, policy, 0.0) == 1.0


def test_server_wait_replaces_backoff_and_an_outage_length_wait_is_capped() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    assert retry_delay(1, policy, {"retry-after": "7"}, 0.0) == 7.0
    # A day is an outage, not a back-off: wait the cap and ask again (never a shorter back-off).
    assert retry_delay(1, policy, {"retry-after": "86400"}, 0.0) == MAX_SERVER_WAIT_SECONDS
    assert retry_delay(3, policy, {}, 0.0) == 2.0


@pytest.mark.parametrize("wait", [0.0, 0.3, 2.0, 7.0, 45.0, 120.0, 3600.0])
@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.999])
def test_a_server_wait_is_never_shortened_nor_lengthened_past_the_documented_bound(
    wait: float, fraction: float
) -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0, jitter=0.25)
    kept = retry_delay(2, policy, {"retry-after-ms": str(wait * 1000)}, fraction)
    honoured = min(wait, MAX_SERVER_WAIT_SECONDS)
    assert honoured <= kept <= honoured + min(honoured * 0.1, 1.0)


def test_retry_after_ms_is_read_alike_by_client_limiter_and_engine() -> None:
    """One reader: the three users all get their numbers from read_server_hints."""
    hints = read_server_hints(
        {
            "retry-after-ms": "250",
            "x-ratelimit-limit-requests": "120",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1m",
        }
    )
    assert hints.retry_after == 0.25
    assert hints.limit_requests == 120.0
    assert hints.window_spent
    assert hints.wait() == 0.25  # the shorter of the retry-after and the spent window's reset


def test_a_reset_is_no_wait_while_the_window_still_has_room() -> None:
    hints = read_server_hints({"x-ratelimit-remaining-requests": "40", "x-ratelimit-reset-requests": "45s"})
    assert hints.wait() is None


def test_unreadable_headers_are_ignored() -> None:
    hints = read_server_hints(
        {"retry-after": "next tuesday", "retry-after-ms": "x", "x-ratelimit-limit-requests": "-3"}
    )
    assert hints == read_server_hints({})


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 529])
def test_retryable_statuses_for_reads_and_billed_calls(status: int) -> None:
    assert may_retry_status(CallKind.READ, status)
    assert may_retry_status(CallKind.BILLED, status)


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 405, 409, 422])
def test_client_errors_never_retry(status: int) -> None:
    for kind in CallKind:
        assert not may_retry_status(kind, status)


def test_billed_creates_retry_only_a_rate_limit() -> None:
    assert may_retry_status(CallKind.BILLED_CREATE, 429)
    for status in (500, 503, 529):
        assert not may_retry_status(CallKind.BILLED_CREATE, status)


def test_unanswered_requests() -> None:
    policy = RetryPolicy()
    assert may_retry_unanswered(CallKind.BILLED_CREATE, never_sent=True, policy=policy)
    assert not may_retry_unanswered(CallKind.BILLED_CREATE, never_sent=False, policy=policy)
    assert may_retry_unanswered(CallKind.READ, never_sent=False, policy=policy)
    assert not may_retry_unanswered(CallKind.BILLED, never_sent=False, policy=policy)
    resend = RetryPolicy(resend_unanswered_billed=True)
    assert may_retry_unanswered(CallKind.BILLED, never_sent=False, policy=resend)
    assert not may_retry_unanswered(CallKind.BILLED_CREATE, never_sent=False, policy=resend)


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay=5, max_delay=1)


def test_rate_limit_headers_as_numbers() -> None:
    headers = {
        "x-ratelimit-limit-requests": "120",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "250ms",
    }
    assert parse_rate_limit_headers(headers) == {
        "limit_requests": 120.0,
        "remaining_requests": 0.0,
        "reset_requests_seconds": 0.25,
    }
