"""Server-sent events: frame encoding and a response that sends one frame per chunk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from starlette.responses import StreamingResponse

from relaybatch.emulator.codecs import fast_json

# Visible text is streamed in pieces of this many characters (about 4 tokens each).
DELTA_CHARS = 16


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data.encode() if isinstance(data, str) else fast_json.dumps(data)
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + payload + b"\n\n"


def pieces(text: str) -> list[str]:
    """The deltas a text streams as (at least one, so an empty answer still has a delta)."""
    return [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)] or [""]


def frames_response(frames: Iterable[bytes], media_type: str = "text/event-stream") -> StreamingResponse:
    async def send() -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    headers = {"cache-control": "no-cache"}
    return StreamingResponse(send(), media_type=media_type, headers=headers)
