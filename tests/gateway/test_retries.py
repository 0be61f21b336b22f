"""Retries as the emulator's request log sees them: what is retried, how often, how long the
client waits, and billed creates that are sent exactly once whatever goes wrong."""

from __future__ import annotations

from typing import Any

import pytest
from gateway_support import ClientFactory, RecordingLimiter, SleepLog, request_count, schedule_faults
from starlette.applications import Starlette

from relaybatch.gateway import (
    AuthenticationFailed,
    BrokenResponse,
    GatewayClient,
    InsufficientBalance,
    OutcomeUnknown,
    RateLimited,
    RetryPolicy,
    ServerError,
)

CHAT = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "hello"}]}
IMAGE = {"model": "relay-image-2", "prompt": "a lighthouse at dusk", "size": "1024x1024", "quality": "low"}
VIDEO = {"model": "relay-video-2", "prompt": "waves on rocks", "seconds": "4", "size": "720x1280"}
VIDEO_V1 = {"model": "relay-video-v1", "prompt": "waves on rocks"}


def _ledger(app: Starlette) -> list[Any]:
    return list(app.state.emulator.ledger)


@pytest.mark.parametrize(
    "fault", ["status=500", "status=529", "status=503", "status=429", "drop=before", "truncate"]
)
async def test_reads_retry_until_the_fault_clears(
    make_client: ClientFactory, emulator_app: Starlette, sleeps: SleepLog, fault: str
) -> None:
    await schedule_faults(emulator_app, {"fault": fault, "at": [1, 2], "paths": ["/v1/models"]})
    async with make_client() as client:
        catalog = await client.list_models()
    assert catalog.data
    assert request_count(emulator_app, "GET", "/v1/models") == 3
    assert len(sleeps.delays) == 2


async def test_retries_stop_at_max_attempts(make_client: ClientFactory, emulator_app: Starlette) -> None:
    async with make_client(fault="status=500", retry=RetryPolicy(max_attempts=3)) as client:
        with pytest.raises(ServerError):
            await client.list_models()
    assert request_count(emulator_app, "GET", "/v1/models") == 3


async def test_backoff_doubles_between_attempts(make_client: ClientFactory, sleeps: SleepLog) -> None:
    policy = RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=1.5, jitter=0.5)
    async with make_client(fault="status=529", retry=policy) as client:
        with pytest.raises(Exception, match="529"):
            await client.list_models()
    # random_fraction is pinned at 0.5 by the fixture: each wait is 75 % of the capped doubling.
    assert sleeps.delays == [0.375, 0.75, 1.125]


@pytest.mark.parametrize(
    "fault",
    ["status=400", "status=401", "status=402", "status=403", "status=404", "status=405", "status=409"],
)
async def test_client_errors_are_sent_once(
    make_client: ClientFactory, emulator_app: Starlette, fault: str
) -> None:
    async with make_client(fault=fault) as client:
        with pytest.raises(Exception, match=fault.split("=")[1]):
            await client.list_models()
    assert request_count(emulator_app, "GET", "/v1/models") == 1


async def test_billed_chat_retries_error_answers(make_client: ClientFactory, emulator_app: Starlette) -> None:
    await schedule_faults(emulator_app, {"fault": "status=529", "at": [1], "paths": ["/v1/chat"]})
    async with make_client() as client:
        await client.chat_completions(CHAT)
    assert request_count(emulator_app, "POST", "/v1/chat/completions") == 2


@pytest.mark.parametrize("fault", ["drop=after", "truncate"])
async def test_unanswered_chat_is_outcome_unknown_and_not_resent(
    make_client: ClientFactory, emulator_app: Starlette, fault: str
) -> None:
    async with make_client(fault=fault) as client:
        with pytest.raises(OutcomeUnknown) as caught:
            await client.chat_completions(CHAT)
    assert isinstance(caught.value.cause, BrokenResponse)
    assert request_count(emulator_app, "POST", "/v1/chat/completions") == 1


async def test_unanswered_chat_is_resent_when_the_policy_allows(
    make_client: ClientFactory, emulator_app: Starlette
) -> None:
    await schedule_faults(emulator_app, {"fault": "drop=after", "at": [1], "paths": ["/v1/chat"]})
    async with make_client(retry=RetryPolicy(resend_unanswered_billed=True)) as client:
        await client.chat_completions(CHAT)
    assert request_count(emulator_app, "POST", "/v1/chat/completions") == 2


async def test_truncated_stream_is_outcome_unknown(
    make_client: ClientFactory, emulator_app: Starlette
) -> None:
    async with make_client(fault="truncate") as client:
        with pytest.raises(OutcomeUnknown):
            await client.chat_completions(CHAT, stream=True)
    assert request_count(emulator_app, "POST", "/v1/chat/completions") == 1


async def _image(client: GatewayClient) -> Any:
    return await client.images_generate(IMAGE)


async def _video(client: GatewayClient) -> Any:
    return await client.video_create(VIDEO)


async def _video_v1(client: GatewayClient) -> Any:
    return await client.video_v1_create(VIDEO_V1)


CREATES = [
    pytest.param(_image, "/v1/images/generations", id="image"),
    pytest.param(_video, "/v2/videos", id="video-v2"),
    pytest.param(_video_v1, "/v1/videos/generations", id="video-v1"),
]


@pytest.mark.parametrize(("create", "path"), CREATES)
@pytest.mark.parametrize("fault", ["drop=after", "status=500", "drop=before", "truncate", "status=529"])
async def test_billed_create_is_sent_exactly_once(
    make_client: ClientFactory, emulator_app: Starlette, create: Any, path: str, fault: str
) -> None:
    async with make_client(fault=fault) as client:
        with pytest.raises(OutcomeUnknown):
            await create(client)
    assert request_count(emulator_app, "POST", path) == 1


async def test_dropped_create_was_charged_once(make_client: ClientFactory, emulator_app: Starlette) -> None:
    """drop=after means the emulator processed and charged the create: one charge, no second."""
    async with make_client(fault="drop=after") as client:
        with pytest.raises(OutcomeUnknown):
            await client.video_create(VIDEO)
    charges = [charge for charge in _ledger(emulator_app) if "/v2/videos" in str(charge)]
    assert len(charges) == 1


@pytest.mark.parametrize(("create", "path"), CREATES)
async def test_billed_create_retries_a_rate_limit(
    make_client: ClientFactory, emulator_app: Starlette, create: Any, path: str
) -> None:
    """A 429 is refused before any work starts, so repeating the create cannot charge twice."""
    await schedule_faults(emulator_app, {"fault": "status=429", "at": [1], "paths": [path]})
    async with make_client() as client:
        await create(client)
    assert request_count(emulator_app, "POST", path) == 2


async def test_insufficient_balance_stops_at_once(
    make_client: ClientFactory, emulator_app: Starlette
) -> None:
    async with make_client(key="rb-empty-key") as client:
        with pytest.raises(InsufficientBalance):
            await client.video_create(VIDEO)
    assert request_count(emulator_app, "POST", "/v2/videos") == 1


async def test_limiter_sees_every_attempt(
    make_client: ClientFactory, emulator_app: Starlette, limiter: RecordingLimiter
) -> None:
    await schedule_faults(emulator_app, {"fault": "status=429", "at": [1, 2], "paths": ["/v1/models"]})
    async with make_client() as client:
        await client.list_models()
        await client.task_get((await client.video_v1_create(VIDEO_V1)).remote_id)
    assert limiter.acquires == ["other", "other", "other", "submit", "poll"]
    statuses = [status for status, _ in limiter.observed]
    assert statuses == [429, 429, 200, 200, 200]
    first_limit = limiter.observed[0][1]
    assert first_limit is not None and "rpm" in first_limit


async def test_the_limiter_hears_of_an_attempt_that_got_no_answer(
    make_client: ClientFactory, emulator_app: Starlette, limiter: RecordingLimiter
) -> None:
    # Without it the run's limiter counted the dropped attempt as on its way for a minute, and
    # while no limit is known nothing else goes until every request is answered.
    await schedule_faults(
        emulator_app,
        {"fault": "drop=before", "at": [1], "paths": ["/v1/models"]},
        {"fault": "truncate", "at": [1], "paths": ["/v1/models/pricing"]},
    )
    async with make_client() as client:
        await client.list_models()
        await client.get_pricing("relay-chat-small")
    assert limiter.events == [
        ("acquire", "other"),
        ("no_answer", None),
        ("acquire", "other"),
        ("observe", (200, None)),
        ("acquire", "other"),
        ("observe", (200, None)),  # a cut-off body was still an answer: its status was observed
        ("acquire", "other"),
        ("observe", (200, None)),
    ]


async def test_rate_limited_account_gives_up_after_max_attempts(
    make_client: ClientFactory, emulator_app: Starlette, sleeps: SleepLog
) -> None:
    async with make_client(key="rb-limited-key", retry=RetryPolicy(max_attempts=2)) as client:
        with pytest.raises(RateLimited):
            for _ in range(10):
                await client.list_models()
    assert sleeps.delays  # the 429's reset hint (or back-off) was waited before the second attempt


async def test_authentication_failure_is_not_retried(
    make_client: ClientFactory, emulator_app: Starlette
) -> None:
    async with make_client(key="rb-wrong") as client:
        with pytest.raises(AuthenticationFailed):
            await client.images_generate(IMAGE)
    assert request_count(emulator_app, "POST", "/v1/images/generations") == 1
