"""Serve the gateway emulator over uvicorn for the peer benchmark, counting answer statuses.

The emulator's own request log counts requests per body but not what it answered, and a peer
cannot tell us how many 429s it swallowed, so a thin ASGI wrapper counts every status the
emulator sends on a public route (``GET /_bench/statuses``). It also notes when the first public
request arrives (``GET /_bench/first``: the system's monotonic clock, which every process on the
machine shares, for the first request of any kind and for the first POST, the first billed call
of a chat run; ``POST /_bench/first`` forgets both, to time the next run). Everything else is the
emulator exactly as ``relaybatch emulator serve`` runs it.

    python benchmarks/peers/emulator_server.py --port 8781 --config FILE
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relaybatch.emulator import create_app, load_config

STATUS_PATH = "/_bench/statuses"
FIRST_PATH = "/_bench/first"


class StatusCounter:
    """Counts the HTTP status of every answer outside the admin routes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.statuses: Counter[int] = Counter()
        self.first_request: float | None = None
        self.first_post: float | None = None  # a catalog read (GET) is not yet an item's call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == STATUS_PATH:
            await self._report(send, {str(status): count for status, count in sorted(self.statuses.items())})
            return
        if scope["path"] == FIRST_PATH:
            if scope["method"] == "POST":
                self.first_request = self.first_post = None
            await self._report(send, {"monotonic": self.first_request, "post": self.first_post})
            return
        if scope["path"].startswith("/_emulator/"):
            await self.app(scope, receive, send)
            return

        if self.first_request is None:
            self.first_request = time.monotonic()
        if self.first_post is None and scope["method"] == "POST":
            self.first_post = time.monotonic()

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses[int(message["status"])] += 1
            await send(message)

        await self.app(scope, receive, counting_send)

    async def _report(self, send: Send, answer: dict[str, object]) -> None:
        body = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args()
    app = StatusCounter(create_app(load_config(args.config)))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
