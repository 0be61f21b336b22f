"""The ceiling of the peer benchmark: a bare aiohttp loop, nothing but the HTTP requests.

Reads the same work file, keeps the same number of requests in flight, and throws every answer
away: no checkpoint, no results file, no retries, no limiter. What a tool does beyond this is
what its users pay for in wall time. Prints one JSON line like the other tools.

    python benchmarks/peers/tool_bare.py --work work.jsonl --base-url URL/v1 --api-key KEY
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from peer_tool import load_work, tool_parser


async def run(rows: list[dict[str, Any]], base_url: str, api_key: str, concurrency: int) -> dict[str, Any]:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for row in rows:
        queue.put_nowait(row)
    completed = failed = 0
    headers = {"Authorization": f"Bearer {api_key}"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal completed, failed
        while not queue.empty():
            row = queue.get_nowait()
            body = {
                "model": row["model"],
                "messages": [{"role": "user", "content": row["prompt"]}],
                "max_tokens": row["max_tokens"],
            }
            async with session.post(f"{base_url}/chat/completions", json=body, headers=headers) as answer:
                await answer.read()
                if answer.status == 200:
                    completed += 1
                else:
                    failed += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return {"completed": completed, "failed": failed}


def main() -> None:
    parser = tool_parser(
        __doc__.splitlines()[0], max_retries=0, max_retries_help="Ignored: the ceiling retries nothing"
    )
    args = parser.parse_args()
    rows = load_work(args.work)
    started = time.perf_counter()
    result = asyncio.run(run(rows, args.base_url, args.api_key, args.concurrency))
    print(json.dumps({**result, "seconds": time.perf_counter() - started, "rate_limited": None}))


if __name__ == "__main__":
    main()
