"""Gateway client throughput: chat completions per second at 4, 64 and 256 requests in flight.

Starts the emulator with ``relaybatch emulator serve`` on a free loopback port (a subprocess,
stopped at the end), then sends plain chat-completions requests through ``GatewayClient`` with the
aiohttp transport (what ``relaybatch.connect`` uses for real sockets) and, for comparison, httpx's
own connection pool. Prints requests per second and the ratio against the 2,000 req/s that
shared/research/http-client.md measured for httpx + aiohttp transport against a bare mock server.

The emulator here is the full product (auth, rate-limit window, request log, billing ledger),
not a bare mock, and client and server share the machine's cores, so read the ratio as "client +
emulator" against "client + empty server".

    .venv/bin/python benchmarks/client_throughput.py [--requests 4000] [--concurrency 4 64 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from ports import free_port as _free_port
from pydantic import SecretStr

from relaybatch.gateway import GatewayClient, GatewayError, RetryPolicy, aiohttp_transport
from relaybatch.settings import EMULATOR_DEMO_KEY

TARGET_REQUESTS_PER_SECOND = 2_000.0  # research/http-client.md, httpx + aiohttp transport
REPO_ROOT = Path(__file__).resolve().parents[1]
REQUEST = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 16}


def serve_bare(port: int) -> None:
    """The research note's server: Starlette on uvicorn answering a fixed chat completion."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    message = {"role": "assistant", "content": "pong"}
    answer = {
        "id": "chatcmpl-bare",
        "object": "chat.completion",
        "created": 0,
        "model": REQUEST["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }

    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse(answer)

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@contextmanager
def served(server_kind: str) -> Iterator[str]:
    """The emulator (or the bare server) under uvicorn in a child process; always stopped."""
    port = _free_port()
    if server_kind == "bare":
        command = [sys.executable, __file__, "--serve-bare", str(port)]
    else:
        command = [sys.executable, "-m", "relaybatch", "emulator", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(port)]
    # stdout (the emulator's start banner) is not part of the figures; errors still reach stderr.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        _wait_until_listening(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_until_listening(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the emulator exited with status {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the emulator did not start listening within 30 s")


def _transport(kind: str, in_flight: int) -> httpx.AsyncBaseTransport:
    if kind == "aiohttp":
        return aiohttp_transport(max_connections=in_flight)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    return httpx.AsyncHTTPTransport(limits=limits)


# requests per second, client CPU ms per request, failures by kind ("OutcomeUnknown(BrokenResponse)")
Measurement = tuple[float, float, Counter[str]]


async def measure(base_url: str, kind: str, in_flight: int, total: int, raw: bool) -> Measurement:
    """(requests per second, client CPU ms per request, failures by kind) for ``total`` chat calls,
    ``in_flight`` at a time. A failed request still counts in the rate: it was a round trip.

    ``raw`` sends the same POST through a bare ``httpx.AsyncClient`` on the same transport, to
    separate the gateway client's own cost (validation, limiter, retry loop, typed result) from
    the transport's and the server's.
    """
    headers = {"authorization": f"Bearer {EMULATOR_DEMO_KEY}"}
    async with (
        GatewayClient(
            base_url,
            SecretStr(EMULATOR_DEMO_KEY),
            transport=_transport(kind, in_flight),
            retry=RetryPolicy(max_attempts=1),
        ) as client,
        httpx.AsyncClient(base_url=base_url, transport=_transport(kind, in_flight), headers=headers) as bare,
    ):

        async def one() -> None:
            if raw:
                (await bare.post("/v1/chat/completions", json=REQUEST)).raise_for_status()
            else:
                await client.chat_completions(REQUEST)

        await asyncio.gather(*(one() for _ in range(min(in_flight, 32))))  # warm the connections
        remaining, failures = total, Counter[str]()

        async def worker() -> None:
            nonlocal remaining, failures
            while remaining > 0:
                remaining -= 1
                try:
                    await one()
                except (GatewayError, httpx.HTTPError) as error:
                    cause = getattr(error, "cause", None)
                    failures[type(error).__name__ + (f"({type(cause).__name__})" if cause else "")] += 1

        started, cpu_started = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        return total / elapsed, cpu / total * 1000, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000, help="Requests per measurement.")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 64, 256], help="In flight.")
    parser.add_argument("--transports", nargs="+", default=["aiohttp", "httpx"], choices=["aiohttp", "httpx"])
    parser.add_argument("--no-raw", action="store_true", help="Skip the bare-httpx comparison rows.")
    parser.add_argument(
        "--server",
        choices=["emulator", "bare"],
        default="emulator",
        help="The full emulator, or the research note's bare Starlette server (client cost alone).",
    )
    parser.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return

    # A plain `kill` must still stop the server child: turn SIGTERM into a normal exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    target = TARGET_REQUESTS_PER_SECOND
    print(
        f"{args.requests} chat-completions requests per run against the {args.server} server; "
        f"target {target:,.0f} req/s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'sender':<22} {'in flight':>9} {'req/s':>8} {'vs target':>10} "
        f"{'client CPU ms/req':>18} {'failed':>7}"
    )
    modes = [False] if args.no_raw else [False, True]
    with served(args.server) as base_url:
        for kind in args.transports:
            for raw in modes:
                label = f"{'bare httpx' if raw else 'GatewayClient'}/{kind}"
                for in_flight in args.concurrency:
                    rate, cpu_ms, failed = asyncio.run(measure(base_url, kind, in_flight, args.requests, raw))
                    line = f"{label:<22} {in_flight:>9} {rate:>8,.0f} {rate / target:>9.2f}x "
                    line += f"{cpu_ms:>18.2f} {sum(failed.values()):>7}"
                    print(line, flush=True)
                    if failed:
                        print(f"{'':<22} failures: {dict(failed)}", flush=True)


if __name__ == "__main__":
    main()
