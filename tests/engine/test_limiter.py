"""The shared adaptive token bucket, on a fake clock."""

from __future__ import annotations

import asyncio
import math
from collections import deque

import pytest
from engine_fakes import FakeClock

from relaybatch.engine import AdaptiveTokenBucket
from relaybatch.engine.limiter import next_rung
from relaybatch.gateway.retry import RetryPolicy, parse_duration, retry_delay


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
    limiter = bucket(clock, 120, burst=1)  # 2 per second, one at a time

    times = await grant_times(limiter, clock, ["submit"] * 21)

    assert times[0] == 1000.0  # the first token is in the bucket already
    assert max(times) - min(times) == pytest.approx(20 * 60 / (120), abs=0.01)


async def test_cold_start_sends_one_request_then_follows_the_limit_its_answer_reports(
    clock: FakeClock,
) -> None:
    limiter = bucket(clock, None)
    waiters = [asyncio.ensure_future(limiter.acquire()) for _ in range(50)]
    for _ in range(20):
        await asyncio.sleep(0)

    assert sum(waiter.done() for waiter in waiters) == 1  # one probe, the rest wait for its answer
    limiter.observe(
        200,
        {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": "599",
            "x-ratelimit-reset-requests": "0.1s",
        },
    )
    await asyncio.gather(*waiters)
    assert limiter.requests_per_minute == pytest.approx(600)
    assert limiter.rate_limited == 0


async def test_a_request_that_got_no_answer_does_not_hold_the_cold_start_probe(clock: FakeClock) -> None:
    # A refused connection (wrong port, a dropped connection) before any limit is known: the probe
    # never gets an answer. It used to count as on its way for 60 s, holding every other request.
    limiter = bucket(clock, None)
    await limiter.acquire()
    limiter.no_answer()
    second = asyncio.ensure_future(limiter.acquire())
    for _ in range(20):
        await asyncio.sleep(0)
    assert second.done() and clock.now < 1000.1
    limiter.observe(200, {})  # the retry's answer: the climb goes on from there
    third = asyncio.ensure_future(limiter.acquire())
    for _ in range(20):
        await asyncio.sleep(0)
    assert third.done() and clock.now < 1000.1


@pytest.mark.parametrize("rung", [0, 1, 5, 6, 29, 30, 119, 120, 599, 600, 1199, 1200])
def test_the_cold_start_ladder_is_the_published_plan_limits_then_doubling(rung: int) -> None:
    expected = {0: 1, 1: 6, 5: 6, 6: 30, 29: 30, 30: 120, 119: 120, 120: 300}
    expected.update({599: 600, 600: 1200, 1199: 1200, 1200: 2400})
    assert next_rung(rung) == expected[rung]


async def run_against_a_sliding_window(
    limiter: AdaptiveTokenBucket, clock: FakeClock, limit: int, requests: int, *, with_headers: bool
) -> list[int]:
    """Eight workers against a server with a sliding 60 s window; each answer arrives a few loop
    turns after its request (so several are in flight). Returns the statuses in answer order."""
    admitted: deque[float] = deque()
    statuses: list[int] = []
    left = [requests]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            await limiter.acquire()
            while admitted and admitted[0] <= clock.now - 60:
                admitted.popleft()
            allowed = len(admitted) < limit
            if allowed:
                admitted.append(clock.now)
            reset = admitted[0] + 60 - clock.now
            headers = {"retry-after": str(max(1, math.ceil(reset)))} if not allowed else {}
            if with_headers:
                headers["x-ratelimit-limit-requests"] = str(limit)
                headers["x-ratelimit-remaining-requests"] = str(limit - len(admitted))
                headers["x-ratelimit-reset-requests"] = f"{reset:.3f}s"
            for _ in range(3):
                await asyncio.sleep(0)
            statuses.append(200 if allowed else 429)
            limiter.observe(200 if allowed else 429, headers, None if allowed else {"rpm": limit})

    await asyncio.gather(*(worker() for _ in range(8)))
    await limiter.aclose()
    return statuses


@pytest.mark.parametrize("limit", [120, 1200])
async def test_a_limit_reported_only_in_a_429_costs_one_429(clock: FakeClock, limit: int) -> None:
    limiter = bucket(clock, None)

    statuses = await run_against_a_sliding_window(limiter, clock, limit, 2 * limit, with_headers=False)

    assert statuses.count(429) == 1
    assert statuses.index(429) == limit  # the first window filled exactly: nothing left unused
    assert limiter.requests_per_minute == pytest.approx(limit)


@pytest.mark.parametrize("limit", [120, 1200])
async def test_a_limit_on_every_answer_costs_no_429(clock: FakeClock, limit: int) -> None:
    statuses = await run_against_a_sliding_window(
        bucket(clock, None), clock, limit, 3 * limit, with_headers=True
    )
    assert statuses.count(429) == 0


@pytest.mark.parametrize("limit", [120, 1200])
async def test_a_configured_limit_costs_no_429_even_when_nothing_reports_it(
    clock: FakeClock, limit: int
) -> None:
    statuses = await run_against_a_sliding_window(
        bucket(clock, limit), clock, limit, 3 * limit, with_headers=False
    )
    assert statuses.count(429) == 0


async def test_a_limit_configured_too_high_is_lowered_by_the_reported_one(clock: FakeClock) -> None:
    limiter = bucket(clock, 6000)

    limiter.observe(200, {"X-RateLimit-Limit-Requests": "1200"})

    assert limiter.requests_per_minute == pytest.approx(1200)


async def test_a_reported_limit_above_the_configured_one_is_not_adopted(clock: FakeClock) -> None:
    limiter = bucket(clock, 120)

    limiter.observe(200, {"x-ratelimit-limit-requests": "600"})

    assert limiter.requests_per_minute == pytest.approx(120)


async def test_a_429_pauses_every_waiter_until_the_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()

    limiter.observe(
        429,
        {"x-ratelimit-reset-requests": "5s"},
        {"rpm": 300, "qps": 5},
    )
    times = await grant_times(limiter, clock, ["submit", "poll", "submit"])

    assert limiter.requests_per_minute == pytest.approx(300)
    assert limiter.rate_limited == 1
    assert min(times) >= 1005.0  # nobody goes before the reset
    assert max(times) - min(times) == pytest.approx(2 * 60 / (300), abs=0.01)


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
    assert limiter.requests_per_minute == pytest.approx(300)
    limiter.observe(429, {})  # the same burst of 429s: one signal
    assert limiter.requests_per_minute == pytest.approx(300)

    for _ in range(200):
        clock.now += 1.5
        limiter.observe(200, {})
    assert limiter.requests_per_minute == pytest.approx(600)


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

    # The full rate, not 30 % of it.
    assert clock.now - start == pytest.approx(60 * 60 / (600), abs=0.05)


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


async def test_sends_never_exceed_what_the_server_still_admits_before_its_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=10)  # 10 at once, 10 per second
    await limiter.acquire()  # one request on its way

    limiter.observe(
        200,
        {
            "x-ratelimit-limit-requests": "606",
            "x-ratelimit-remaining-requests": "3",
            "x-ratelimit-reset-requests": "2.5s",
        },
    )
    await limiter.acquire()  # the in-flight count went back to 0: 3 slots left
    await limiter.acquire()
    await limiter.acquire()
    before = clock.now
    await limiter.acquire()

    assert clock.now - before == pytest.approx(2.5, abs=0.01)  # the 4th waited for the reset


async def test_a_remaining_count_without_a_reset_holds_for_a_second(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=10)
    await limiter.acquire()
    await limiter.acquire()  # two on their way

    limiter.observe(200, {"x-ratelimit-remaining-requests": "1"})  # the other one takes that slot
    await limiter.acquire()

    assert clock.now == pytest.approx(1001.0, abs=0.01)


def sliding_window_headers(remaining: int, reset: str) -> dict[str, str]:
    """What the emulator's sliding window sends on every answer, injected 429s included."""
    return {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
    }


async def test_a_429_while_requests_remain_holds_briefly_not_until_the_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()

    limiter.observe(429, sliding_window_headers(400, "45.000s"), {"rpm": 600, "qps": 10})
    times = await grant_times(limiter, clock, ["submit", "poll", "submit"])

    assert limiter.rate_limited == 1
    assert limiter.not_window_429s == 1
    assert limiter.pauses == 0
    assert limiter.requests_per_minute == pytest.approx(600)  # learned, not halved
    assert min(times) == pytest.approx(1000.5, abs=0.01)  # the short hold, not 45 s
    assert max(times) - min(times) < 1.0


async def test_a_429_while_requests_remain_waits_its_retry_after_capped(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()

    limiter.observe(429, {**sliding_window_headers(400, "45.000s"), "retry-after": "2"})
    await limiter.acquire()
    assert clock.now == pytest.approx(1002.0, abs=0.01)

    limiter.observe(429, {**sliding_window_headers(400, "45.000s"), "retry-after": "30"})
    await limiter.acquire()
    assert clock.now == pytest.approx(1007.0, abs=0.01)  # held 5 s at most, then went


async def test_a_hold_for_a_429_that_was_not_the_windows_costs_no_throughput(clock: FakeClock) -> None:
    held = bucket(clock, 600)  # 10 per second, 10 tokens of capacity
    await grant_times(held, clock, ["submit"] * 10)  # drain the first burst
    start = clock.now

    held.observe(429, sliding_window_headers(100, "59.000s"))
    await grant_times(held, clock, ["submit"] * 50)

    # 50 tokens at ~600 per minute take ~5 s whether or not the run held back for 0.5 s of them.
    assert clock.now - start == pytest.approx(50 * 60 / (600), abs=0.15)


async def test_a_429_that_spent_the_window_pauses_everyone_until_the_reset(clock: FakeClock) -> None:
    limiter = bucket(clock, 6000, burst=1)  # configured 10 x too high
    await limiter.acquire()

    limiter.observe(
        429, {**sliding_window_headers(0, "12.500s"), "retry-after": "13"}, {"rpm": 600, "qps": 10}
    )
    times = await grant_times(limiter, clock, ["submit", "poll"])

    assert limiter.not_window_429s == 0
    assert limiter.pauses == 1
    assert limiter.requests_per_minute == pytest.approx(600)  # the reported limit is adopted
    assert min(times) >= 1012.5  # the reset, the shorter of the two waits
    assert min(times) < 1013.0


async def test_a_spent_window_with_a_retry_after_shorter_than_the_reset_waits_the_retry_after(
    clock: FakeClock,
) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()

    limiter.observe(429, {**sliding_window_headers(0, "40s"), "retry-after-ms": "800"})
    await limiter.acquire()

    assert 1000.8 <= clock.now < 1001.0  # the pause, then one token's time at the emptied bucket


async def test_a_429_with_only_the_body_limit_keeps_pausing_everyone(clock: FakeClock) -> None:
    limiter = bucket(clock, None, burst=1)
    await limiter.acquire()

    limiter.observe(429, {}, {"rpm": 120, "qps": 2})
    await limiter.acquire()

    assert limiter.requests_per_minute == pytest.approx(120)
    assert limiter.not_window_429s == 0
    assert clock.now >= 1001.0  # the default pause: the window may be spent


def test_the_clients_own_wait_for_a_429_that_was_not_the_windows_is_its_back_off() -> None:
    # The client sleeps before resending a refused request, then takes a token from this bucket:
    # the window's reset must not be that sleep when requests remain, or the two waits add up.
    policy = RetryPolicy(base_delay=0.5, jitter=0.0)
    assert retry_delay(1, policy, sliding_window_headers(400, "45.000s"), 0.0) == 0.5
    assert retry_delay(1, policy, {**sliding_window_headers(400, "45s"), "retry-after": "2"}, 0.0) == 2.0
    assert retry_delay(1, policy, sliding_window_headers(0, "45.000s"), 0.0) == 45.0
    assert retry_delay(1, policy, {"x-ratelimit-reset-requests": "3s"}, 0.0) == 3.0


async def test_a_429_the_runs_own_minute_explains_waits_for_the_minute_not_the_retry_after(
    clock: FakeClock,
) -> None:
    # The cold-start climb filled the window exactly; its probe's 429 names the limit. The window
    # frees when the first of our sends leaves it (60 s + the 0.5 s margin), not a whole second
    # later as the rounded-up Retry-After would have it.
    limiter = bucket(clock, None)
    sent = 0
    while sent < 120:  # the climb, each answer without a limit: 1, 6, 30, then the rung 120
        answered = sent
        while sent < 120:
            waiter = asyncio.ensure_future(limiter.acquire())
            for _ in range(3):
                await asyncio.sleep(0)
            if not waiter.done():
                waiter.cancel()
                break
            sent += 1
        for _ in range(sent - answered):
            limiter.observe(200, {})
    assert clock.now < 1001.0
    probe = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0)
    assert probe.done()  # one probe alone past the rung

    limiter.observe(429, {"retry-after": "60"}, {"rpm": 120, "qps": 2.0})
    times = await grant_times(limiter, clock, ["submit"] * 3)

    assert limiter.pauses == 0
    assert limiter.requests_per_minute == 120
    assert min(times) == pytest.approx(1060.5, abs=0.01)
    assert max(times) == pytest.approx(1060.5, abs=0.01)  # the climb's burst, replayed


async def test_a_reported_per_second_limit_below_the_minutes_paces_the_run(clock: FakeClock) -> None:
    limiter = bucket(clock, 600, burst=1)
    await limiter.acquire()
    limiter.observe(429, {"x-ratelimit-remaining-requests": "500"}, {"rpm": 600, "qps": 5})
    assert limiter.poll_budget_per_second() == pytest.approx(5 * 0.3)

    times = sorted(await grant_times(limiter, clock, ["submit"] * 12))

    assert times[-1] - times[2] == pytest.approx(9 * 0.2, abs=0.01)  # 5 per second, not 10


async def test_a_qps_that_only_restates_the_minute_does_not_slow_the_run(clock: FakeClock) -> None:
    limiter = bucket(clock, None)
    await limiter.acquire()
    limiter.observe(429, {}, {"rpm": 100, "qps": 1.67})  # 100 / 60 rounded up
    assert limiter.poll_budget_per_second() == pytest.approx(100 / 60 * 0.3)

    limiter.observe(429, {}, {"rpm": 50, "qps": 0.83})  # 50 / 60 rounded down
    assert limiter.poll_budget_per_second() == pytest.approx(50 / 60 * 0.3)
