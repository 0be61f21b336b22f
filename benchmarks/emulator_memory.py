"""How much memory a served emulator keeps per request: what a long dry run against it costs.

Target: at most 200 bytes of server RSS growth per billed chat request, so a million-item dry run
stays within a few hundred MB. The emulator remembers every charge (its ledger) and a count per
distinct request body (its request log) for as long as it runs; both are exact on purpose (tests
reconcile relaybatch's ledger with it call by call), so they must be compact.

The server runs as `relaybatch emulator serve` in a subprocess; `--requests` distinct chat
requests (each body names its own item) go to it over keep-alive httpx connections after a
warm-up of `--warmup` requests, which sizes the allocator for the per-request transients. The
figure is (RSS after - RSS after warm-up) / requests, read from /proc/PID/status. Send at least
50,000: over a few thousand requests the allocator's and arrays' growth steps dominate the figure.

    .venv/bin/python benchmarks/emulator_memory.py [--requests 100000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
from emulator_throughput import serve_command, wait_until_up
from ports import free_port

TARGET_BYTES_PER_REQUEST = 200
REPO = Path(__file__).resolve().parents[1]
HEADERS = {"Authorization": "Bearer rb-demo-key"}


def body(number: int) -> bytes:
    """A distinct chat request: one more distinct body in the request log, one more charge."""
    message = f"Item {number}: name three rivers in Europe."
    return json.dumps(
        {"model": "relay-chat-small", "messages": [{"role": "user", "content": message}]}
    ).encode()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no VmRSS for process {pid}")


async def send(base: str, first: int, count: int, concurrency: int) -> Counter[int]:
    """Send requests ``first`` .. ``first + count - 1``, ``concurrency`` at a time."""
    statuses: Counter[int] = Counter()
    numbers = iter(range(first, first + count))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, limits=limits, timeout=60) as client:

        async def worker() -> None:
            for number in numbers:
                answer = await client.post(
                    "/v1/chat/completions", content=body(number), headers={"Content-Type": "application/json"}
                )
                statuses[answer.status_code] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="measured distinct chat requests")
    parser.add_argument("--warmup", type=int, default=5_000, help="unmeasured requests sent first")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    args = parser.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(serve_command(port), cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        wait_until_up(base, server)
        # Enough balance that no request of the run gets 402 (a refused call is not charged).
        httpx.post(base + "/_emulator/accounts/demo/balance", json={"usd": "1000000"}).raise_for_status()
        warm = asyncio.run(send(base, 0, args.warmup, args.concurrency))
        before = rss_bytes(server.pid)
        started = time.monotonic()
        measured = asyncio.run(send(base, args.warmup, args.requests, args.concurrency))
        elapsed = time.monotonic() - started
        after = rss_bytes(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)

    statuses = warm + measured
    if set(statuses) != {200}:
        raise SystemExit(f"not every request was answered 200: {dict(statuses)}")
    per_request = (after - before) / args.requests
    print(f"emulator memory: {per_request:,.0f} bytes of server RSS per distinct billed chat request")
    print(f"  RSS {before / 2**20:,.1f} MB after {args.warmup:,} warm-up requests -> {after / 2**20:,.1f} MB")
    rate = f"{args.requests / elapsed:,.0f}/s, {args.concurrency} in flight"
    print(f"  after {args.requests:,} more in {elapsed:.1f} s ({rate})")
    ratio = per_request / TARGET_BYTES_PER_REQUEST
    verdict = "meets" if ratio <= 1 else "misses"
    print(
        f"  target <= {TARGET_BYTES_PER_REQUEST} bytes per request: ratio {ratio:.2f} ({verdict} the target)"
    )
    print(f"  at 1,000,000 requests: about {per_request * 1_000_000 / 2**20:,.0f} MB kept")


if __name__ == "__main__":
    main()
