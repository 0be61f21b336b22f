"""The shared adaptive token bucket, on a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from engine_fakes import FakeClock

from relaybatch.engine.limiter import AdaptiveTokenBucket, parse_duration


def bucket(clock: FakeClock, rpm: float | None, **options: float) -> AdaptiveTokenBucket:
    return AdaptiveTokenBucket(rpm, clock=clock, sleep=clock.sleep, **options)


async def grant_times(limiter: AdaptiveTokenBucket, clock: FakeClock, purposes: list[str]) -> list[float]:
    times: list[float] = []

    async def one(purpose: str) -> None:
        await limiter.acquire(purpose)  # type: ignore[arg-type]
        times.append(clock.now)

    await asyncio.gather(*(one(purpose) for purpose in purposes))
    return times


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2", 2.0), ("0.5", 0.5), ("250ms", 0.25), ("1s", 1.0), ("1m30s", 90.0), ("soon", None), (None, None)],
)
def test_parse_duration(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


async def test_configured_rate_is_enforced_after_the_burst(clock: FakeClock) -> None:
    limiter = bucket(clock, 120, burst=1)  # 2 per second

    times = await grant_times(limiter, clock, ["submit"] * 21)

    assert times[0] == 1000.0  # the first token is in the bucket already
    assert max(times) - min(times) == pytest.approx(10.0, abs=0.01)


async def test_open_bucket_never_waits_until_a_limit_is_reported(clock: FakeClock) -> None:
    limiter = bucket(clock, None)

    times = await grant_times(limiter, clock, ["submit"] * 500)

    assert set(times) == {1000.0}
    limiter.observe(200, {"x-ratelimit-limit-requests": "600"})
    assert limiter.requests_per_minute == pytest.approx(594.0)


async def test_a_limit_configured_too_high_is_lowered_by_the_reported_one(clock: FakeClock) -> None:
    limiter = bucket(clock, 6000)

    limiter.observe(200, {"X-RateLimit-Limit-Requests": "1200"})

    assert limiter.requests_per_minute == pytest.approx(1188.0)


async def test_a_reported_limit_above_the_configured_one_is_not_adopted(clock: FakeClock) -> None:
    limiter = bucket(clock, 120)

    limiter.observe(200, {"x-ratelimit-limit-requests": "600"})

    assert limiter.requests_per_minute == 120


async def test_a_429_pauses_every_waiter_until_the_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()

    limiter.observe(
        429,
        {"x-ratelimit-reset-requests": "5s"},
        {"rpm": 300, "qps": 5},
    )
    times = await grant_times(limiter, clock, ["submit", "poll", "submit"])

    assert limiter.requests_per_minute == pytest.approx(297.0)
    assert limiter.rate_limited == 1
    assert min(times) >= 1005.0  # nobody goes before the reset
    assert max(times) - min(times) == pytest.approx(2 * 60 / 297.0, abs=0.01)


async def test_remaining_zero_pauses_until_the_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, None)

    limiter.observe(
        200,
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "3",
        },
    )
    await limiter.acquire()

    assert clock.now >= 1003.0


async def test_a_429_without_hints_halves_the_rate_then_converges_back(clock: FakeClock) -> None:
    limiter = bucket(clock, 600)

    limiter.observe(429, {})
    assert limiter.requests_per_minute == 300.0
    limiter.observe(429, {})  # the same burst of 429s: one signal
    assert limiter.requests_per_minute == 300.0

    for _ in range(200):
        clock.now += 1.5
        limiter.observe(200, {})
    assert limiter.requests_per_minute == 600.0


async def test_polls_and_submissions_share_tokens_by_the_configured_split(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1, poll_share=0.25)

    granted: dict[str, int] = {"submit": 0, "poll": 0}
    order: list[str] = []

    async def one(purpose: str) -> None:
        await limiter.acquire(purpose)  # type: ignore[arg-type]
        order.append(purpose)

    await asyncio.gather(*(one("submit") for _ in range(300)), *(one("poll") for _ in range(300)))
    for purpose in order[:200]:
        granted[purpose] += 1
    assert 45 <= granted["poll"] <= 55  # 25 % of the first 200 tokens
    assert 145 <= granted["submit"] <= 155


async def test_an_idle_lane_lends_its_share(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1, poll_share=0.3)
    start = clock.now

    await grant_times(limiter, clock, ["poll"] * 61)

    assert clock.now - start == pytest.approx(6.0, abs=0.01)  # full rate, not 30 % of it


async def test_a_cancelled_waiter_does_not_use_a_token(clock: FakeClock) -> None:
    limiter = bucket(clock, 60, burst=1)
    await limiter.acquire()
    waiter = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    waiter.cancel()

    await limiter.acquire()

    assert limiter.granted["submit"] == 2
    await limiter.aclose()


def test_poll_budget_follows_the_rate(clock: FakeClock) -> None:
    limiter = bucket(clock, 120, poll_share=0.5)
    assert limiter.poll_budget_per_second() == pytest.approx(1.0)
    assert bucket(clock, None).poll_budget_per_second() is None


async def test_tokens_never_exceed_what_the_server_still_admits(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=10)  # 10 tokens ready, 10 per second
    await limiter.acquire()  # one request on its way

    limiter.observe(200, {"x-ratelimit-limit-requests": "606", "x-ratelimit-remaining-requests": "3"})
    await limiter.acquire()  # the in-flight count went back to 0: 3 slots left
    await limiter.acquire()
    await limiter.acquire()
    before = clock.now
    await limiter.acquire()

    assert clock.now - before == pytest.approx(0.1, abs=0.01)  # the 4th waited for a new token
