"""The API key never shows in a repr or an exception message, and the public names are locked."""

from __future__ import annotations

import logging

import pytest
from gateway_support import ClientFactory
from starlette.applications import Starlette

from relaybatch.gateway import GatewayError, OutcomeUnknown, RetryPolicy

SECRET = "rb-demo-key"
CHAT = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "hello"}]}


@pytest.mark.parametrize("fault", ["status=401", "status=429", "status=500", "drop=after", "truncate"])
async def test_key_never_appears_in_errors_or_logs(
    make_client: ClientFactory, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    caplog.set_level(logging.DEBUG)
    async with make_client(fault=fault, retry=RetryPolicy(max_attempts=2)) as client:
        assert SECRET not in repr(client)
        with pytest.raises(GatewayError) as caught:
            await client.chat_completions(CHAT)
    error = caught.value
    chain = [error, getattr(error, "cause", None), error.__cause__, error.__context__]
    for item in chain:
        assert SECRET not in str(item) and SECRET not in repr(item)
    assert SECRET not in caplog.text


async def test_outcome_unknown_names_the_call(make_client: ClientFactory, emulator_app: Starlette) -> None:
    async with make_client(fault="drop=after") as client:
        with pytest.raises(OutcomeUnknown, match=r"POST /v2/videos .*outcome unknown"):
            await client.video_create(
                {"model": "relay-video-2", "prompt": "p", "seconds": "4", "size": "720x1280"}
            )
