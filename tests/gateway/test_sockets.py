"""Over real sockets: the aiohttp transport reports every broken connection as a connect timeout,
so telling "never sent" from "sent, no answer" must not trust the httpx class. A dropped billed
create stays sent once; a refused connection (nothing sent) is retried."""

from __future__ import annotations

import asyncio
import socket

import pytest
from gateway_support import ServedEmulator, SleepLog, request_count
from pydantic import SecretStr

from relaybatch.gateway import (
    ConnectFailed,
    GatewayClient,
    OutcomeUnknown,
    RetryPolicy,
    aiohttp_transport,
)
from relaybatch.settings import EMULATOR_DEMO_KEY

VIDEO = {"model": "relay-video-2", "prompt": "waves on rocks", "seconds": "4", "size": "720x1280"}


@pytest.mark.parametrize("fault", ["drop=after", "drop=before", "status=500"])
async def test_billed_create_over_aiohttp_is_sent_once(served_emulator: ServedEmulator, fault: str) -> None:
    async with GatewayClient(
        served_emulator.base_url,
        SecretStr(EMULATOR_DEMO_KEY),
        transport=aiohttp_transport(),
        headers={"x-emulator-fault": fault},
        sleep=SleepLog(),
    ) as client:
        with pytest.raises(OutcomeUnknown):
            await client.video_create(VIDEO)
    assert request_count(served_emulator.app, "POST", "/v2/videos") == 1


async def test_reads_over_aiohttp_retry_a_dropped_connection(served_emulator: ServedEmulator) -> None:
    async with GatewayClient(
        served_emulator.base_url,
        SecretStr(EMULATOR_DEMO_KEY),
        transport=aiohttp_transport(),
        headers={"x-emulator-fault": "drop=after"},
        retry=RetryPolicy(max_attempts=3),
        sleep=SleepLog(),
    ) as client:
        with pytest.raises(Exception, match="GET /v1/models"):
            await client.list_models()
    assert request_count(served_emulator.app, "GET", "/v1/models") == 3


def _closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_refused_connection_is_retried_even_for_a_billed_create(kind: str) -> None:
    sleeps = SleepLog()
    transport = aiohttp_transport() if kind == "aiohttp" else None
    async with GatewayClient(
        f"http://127.0.0.1:{_closed_port()}",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=transport,
        retry=RetryPolicy(max_attempts=3),
        sleep=sleeps,
    ) as client:
        with pytest.raises(ConnectFailed):
            await client.video_create(VIDEO)
    assert len(sleeps.delays) == 2


class SilentCloser:
    """A TCP server that reads each request head and hangs up without a byte of answer: what a
    gateway crash after receiving a create looks like. The emulator's drop faults send a status
    line first, so they cannot produce this."""

    def __init__(self) -> None:
        self.requests_seen = 0
        self.server: asyncio.base_events.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head:
            self.requests_seen += 1
        writer.close()
        await writer.wait_closed()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
async def test_hang_up_after_the_request_is_outcome_unknown(kind: str) -> None:
    closer = SilentCloser()
    transport = aiohttp_transport() if kind == "aiohttp" else None
    async with (
        closer as base_url,
        GatewayClient(
            base_url, SecretStr(EMULATOR_DEMO_KEY), transport=transport, sleep=SleepLog()
        ) as client,
    ):
        with pytest.raises(OutcomeUnknown):
            await client.video_create(VIDEO)
    assert closer.requests_seen == 1
