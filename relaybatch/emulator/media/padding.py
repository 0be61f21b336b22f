"""The long-request behaviour of non-streaming image calls: whitespace before the JSON document.

If the (simulated) upstream has not answered after ``first_seconds``, the gateway writes one
whitespace chunk, then another every ``interval_seconds``, until the real body is ready. JSON
allows leading whitespace, so the document still parses; a client whose read timeout is shorter
than the gap still fails, which is the point of emulating it. Wall-clock time (not the emulator's
injectable clock): this is about how long a connection stays silent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.responses import Response, StreamingResponse

from relaybatch.emulator.route_settings import PaddingSettings


async def _upstream(produce: Callable[[], Awaitable[bytes]], latency: float) -> bytes:
    """The body once both the work is done and the simulated upstream latency has passed."""
    ready_at = time.monotonic() + latency
    body = await produce()
    remaining = ready_at - time.monotonic()
    if remaining > 0:
        await asyncio.sleep(remaining)
    return body


async def padded_chunks(
    produce: Callable[[], Awaitable[bytes]], latency: float, padding: PaddingSettings
) -> AsyncIterator[bytes]:
    """Whitespace chunks while the upstream is silent, then the JSON body."""
    work = asyncio.ensure_future(_upstream(produce, latency))
    try:
        wait = padding.first_seconds
        while True:
            done, _ = await asyncio.wait({work}, timeout=wait)
            if done:
                break
            yield padding.chunk.encode()
            wait = padding.interval_seconds
        yield work.result()
    finally:
        # A client that hangs up mid-wait must not leave the work running.
        if not work.done():
            work.cancel()


async def padded_json_response(
    produce: Callable[[], Awaitable[bytes]], latency: float, padding: PaddingSettings
) -> Response:
    """A plain JSON answer when there is no upstream latency; otherwise a streamed one that pads."""
    if latency <= 0:
        return Response(await produce(), media_type="application/json")
    return StreamingResponse(padded_chunks(produce, latency, padding), media_type="application/json")
