"""The server's wait hints, honoured against the emulator: the injected sleep advances the
emulator's clock by exactly what the client chose to wait, so a retry after the hint succeeds."""

from __future__ import annotations

import httpx
from gateway_support import BASE_URL, RecordingLimiter, request_count
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
from relaybatch.gateway import GatewayClient, RetryPolicy, SearchResult


class ClockSleep:
    """Sleeps on the emulator's clock instead of the wall clock, and remembers each wait."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.app.state.emulator.clock.advance(seconds)


def _client(app: Starlette, key: str, sleep: ClockSleep, limiter: RecordingLimiter) -> GatewayClient:
    return GatewayClient(
        BASE_URL,
        SecretStr(key),
        transport=httpx.ASGITransport(app=app),
        retry=RetryPolicy(max_attempts=3),
        limiter=limiter,
        sleep=sleep,
        random_fraction=lambda: 0.0,
    )


async def test_rate_limit_waits_for_the_reset_then_succeeds(
    emulator_app: Starlette, limiter: RecordingLimiter
) -> None:
    """The limited account allows 6 requests a minute; the 7th waits out the window once."""
    sleep = ClockSleep(emulator_app)
    async with _client(emulator_app, "rb-limited-key", sleep, limiter) as client:
        for _ in range(7):
            await client.list_models()
    assert request_count(emulator_app, "GET", "/v1/models") == 8
    [waited] = sleep.delays
    # The shorter of Retry-After (whole seconds, rounded up) and the window's exact reset.
    assert 59 <= waited <= 60
    statuses = [status for status, _ in limiter.observed]
    assert statuses.count(429) == 1
    assert dict(limiter.observed[statuses.index(429)][1] or {})["rpm"] == 6


async def test_search_upstream_503_honours_retry_after(limiter: RecordingLimiter) -> None:
    config = load_config().model_copy(update={"media": {"search": {"upstream_rpm": 1}}})
    app = create_app(config)
    sleep = ClockSleep(app)
    async with _client(app, "rb-demo-key", sleep, limiter) as client:
        first = await client.web_search("simple-search", {"q": "tides"})
        second = await client.web_search("simple-search", {"q": "currents"})
    assert isinstance(first, SearchResult) and isinstance(second, SearchResult)
    assert request_count(app, "GET", "/v1/websearch/simple-search") == 3
    [waited] = sleep.delays
    assert waited >= 1 and waited == int(waited)
    assert [status for status, _ in limiter.observed] == [200, 503, 200]
