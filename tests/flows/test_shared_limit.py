"""The shared limit: block leasing, staleness, sizing, and the real Prefect global limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from relaybatch.errors import UserError
from relaybatch.shared_limit import SharedLimit, SharedLimiter, ensure_shared_limit, prefect_lease


class FakeLease:
    def __init__(self) -> None:
        self.calls: list[int] = []

    async def __call__(self, tokens: int) -> None:
        self.calls.append(tokens)


class RecordingLocal:
    def __init__(self) -> None:
        self.acquired: list[str] = []
        self.observed: list[int] = []

    async def acquire(self, purpose: Any = "submit") -> None:
        self.acquired.append(purpose)

    def observe(self, status: int, headers: Mapping[str, str], rate_limit: Any = None) -> None:
        self.observed.append(status)

    def no_answer(self) -> None:
        self.observed.append(0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sizes_follow_the_rate() -> None:
    limit = SharedLimit(rpm=1200)
    assert limit.block_size == 10  # about half a second of the whole limit per lease
    assert limit.burst_size == 20
    # burst + 60 s of refill never exceed the per-minute limit (the gateway's sliding window)
    assert limit.burst_size + 60 * limit.decay_per_second == pytest.approx(1200)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rpm": 0}, "rpm must be a positive"),
        ({"rpm": 600, "block": 0}, "block must be positive"),
        ({"rpm": 600, "block": 10, "burst": 5}, "smaller than the block"),
        ({"rpm": 60, "burst": 60}, "leaves no room"),
    ],
)
def test_bad_sizes_are_user_errors(values: dict[str, int], message: str) -> None:
    with pytest.raises(UserError, match=message):
        SharedLimit(**values)  # type: ignore[arg-type]


async def test_leases_start_at_one_token_and_double_to_a_block_past_the_local_limiter() -> None:
    lease, local = FakeLease(), RecordingLocal()
    limiter = SharedLimiter(SharedLimit(rpm=600, block=5), lease, local=local)

    for _ in range(12):
        await limiter.acquire("submit")
    await limiter.acquire("poll")

    assert lease.calls == [1, 2, 4, 5, 5]  # 1 + 2 + 4 + 5 = 12 requests, then a block for the 13th
    assert limiter.tokens_held == 4
    assert local.acquired == ["submit"] * 12 + ["poll"]
    limiter.observe(429, {"retry-after": "1"})
    assert local.observed == [429]


async def test_tokens_held_too_long_are_dropped_not_spent_later_and_the_next_lease_is_sized_to_the_use() -> (
    None
):
    lease, clock = FakeLease(), FakeClock()
    limit = SharedLimit(rpm=600, block=8)
    limiter = SharedLimiter(limit, lease, clock=clock)

    for _ in range(1 + 2 + 4 + 1):  # leases of 1, 2, 4, then 8 of which 1 is used
        await limiter.acquire()
    clock.now += limit.token_ttl + 0.1
    await limiter.acquire()  # the 7 left are too old: dropped, and a lease of twice the 1 used taken
    await limiter.acquire()

    assert lease.calls == [1, 2, 4, 8, 2]
    assert limiter.tokens_dropped == 7
    assert limiter.tokens_held == 0


async def test_a_process_sending_little_keeps_leasing_little() -> None:
    """One request per lease period (a few polls): each lease gives out one token and drops the
    rest, so the next asks for two, never a whole block of room the others could have used."""
    lease, clock = FakeLease(), FakeClock()
    limit = SharedLimit(rpm=1200)
    limiter = SharedLimiter(limit, lease, clock=clock)

    for _ in range(6):
        await limiter.acquire("poll")
        clock.now += limit.token_ttl + 0.1

    assert lease.calls == [1, 2, 2, 2, 2, 2]
    assert limit.block_size == 10


async def test_concurrent_waiters_share_one_lease() -> None:
    gate = asyncio.Event()
    calls: list[int] = []

    async def slow_lease(tokens: int) -> None:
        calls.append(tokens)
        await gate.wait()

    limiter = SharedLimiter(SharedLimit(rpm=600, block=4), slow_lease)
    waiters = [asyncio.create_task(limiter.acquire()) for _ in range(4)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*waiters)

    assert calls == [1, 2, 4]  # the first waiter's 1, the next two share 2, the last leases 4
    assert limiter.tokens_held == 3


async def test_while_the_server_is_away_polls_pass_and_billed_sends_wait_for_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import httpx

    class AwayLease:
        def __init__(self) -> None:
            self.away = True
            self.calls = 0

        async def __call__(self, tokens: int) -> None:
            self.calls += 1
            if self.away:
                raise httpx.ConnectError("connection refused")

    lease, local = AwayLease(), RecordingLocal()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            lease.away = False  # the server answers again

    limiter = SharedLimiter(SharedLimit(rpm=600), lease, local=local, sleep=sleep)
    await limiter.acquire("poll")  # paid work is never held up by the server
    await limiter.acquire("poll")
    assert local.acquired == ["poll", "poll"] and slept == []
    await limiter.acquire("submit")  # waits, asking again each second, until the server answers
    assert slept == [1.0, 1.0, 1.0] and local.acquired == ["poll", "poll", "submit"]
    assert limiter.unreachable_since is None and limiter.leases == 1
    err = capsys.readouterr().err
    assert "cannot be reached (ConnectError): no new billed request is sent" in err
    assert "answers again" in err and "sending resumes" in err


@pytest.mark.usefixtures("prefect_harness")
async def test_a_missing_global_limit_fails_loudly() -> None:
    lease = prefect_lease(SharedLimit(rpm=600, name="relaybatch-test-never-created"))
    with pytest.raises(UserError, match="does not exist"):
        await lease(1)


@pytest.mark.usefixtures("prefect_harness")
async def test_two_limiters_on_one_global_limit_never_get_more_than_it_allows() -> None:
    """Two limiters (as two processes would) draw from one Prefect limit: what both got together
    stays within the bucket's burst plus its refill over the elapsed time."""
    limit = SharedLimit(rpm=1200, name="relaybatch-test-shared")
    await ensure_shared_limit(limit)
    await ensure_shared_limit(limit)  # idempotent: a second run of the same setup changes nothing
    first = SharedLimiter(limit, prefect_lease(limit))
    second = SharedLimiter(limit, prefect_lease(limit))
    started = time.monotonic()

    async def take(limiter: SharedLimiter, count: int) -> None:
        for _ in range(count):
            await limiter.acquire()

    await asyncio.gather(take(first, 50), take(second, 50))
    elapsed = time.monotonic() - started

    leased = first.tokens_leased + second.tokens_leased
    assert first.leases >= 2 and second.leases >= 2  # both really drew from the shared bucket
    assert leased <= limit.burst_size + limit.decay_per_second * elapsed + limit.block_size


def test_run_with_a_shared_limit_but_no_server_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from relaybatch import shared_limit
    from relaybatch.cli import app

    monkeypatch.setattr(shared_limit, "prefect_server_configured", lambda: False)
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo.csv"

    result = CliRunner().invoke(app, ["run", str(demo), "--shared-limit-rpm", "600"])

    assert result.exit_code == 1
    assert "a shared limit needs a Prefect server" in result.output
