"""Emulator media routes: requests per second in-process, against what a run can ask of them.

The busiest published plan allows 600 requests per minute (10 per second) for an account, polls
included; a runner benchmark may use several accounts. The target is ten times that plan per
route - 100 requests per second on one core - so the emulator is never what a media benchmark
measures. In-process (httpx.ASGITransport), no injected latency, default settings (images drawn
at 256 px on the long side; videos 96 px frames).

    .venv/bin/python benchmarks/emulator_media.py [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx

from relaybatch.emulator import create_app, load_config

TARGET_REQUESTS_PER_SECOND = 100.0  # 10 x the 600 rpm plan
HEADERS = {"Authorization": "Bearer rb-demo-key"}
JUDGMENT = {
    "model": "relay-judge-1",
    "state": "I was charged twice for one order.",
    "questions": {
        "complaint": {"type": "noul", "instructions": "Is it a complaint?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "", "tech": ""}},
    },
}


async def timed(label: str, count: int, call: Callable[[int], Awaitable[httpx.Response]]) -> float:
    started = time.perf_counter()
    for index in range(count):
        response = await call(index)
        assert response.status_code == 200, response.text[:200]
    rate = count / (time.perf_counter() - started)
    print(f"{label:<34} {rate:9.1f} req/s   ratio vs target {rate / TARGET_REQUESTS_PER_SECOND:6.2f}")
    return rate


async def main(requests: int) -> None:
    config = load_config()
    for account in config.accounts:
        account.balance_usd *= 1000  # a long benchmark must not run out of money
    app = create_app(config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as http:

        def image(fmt: str) -> Callable[[int], Awaitable[httpx.Response]]:
            def call(i: int) -> Awaitable[httpx.Response]:
                body = {"model": "relay-image-2", "prompt": f"picture {i}", "output_format": fmt}
                return http.post("/v1/images/generations", headers=HEADERS, json=body)

            return call

        await timed("images (png, 1024x1024)", requests, image("png"))
        await timed("images (jpeg, 1024x1024)", requests, image("jpeg"))
        video_id = (
            await http.post("/v2/videos", headers=HEADERS, json={"model": "relay-video-2", "prompt": "bench"})
        ).json()["id"]
        await timed(
            "video V2 create",
            requests,
            lambda i: http.post(
                "/v2/videos", headers=HEADERS, json={"model": "relay-video-2", "prompt": f"v{i}"}
            ),
        )
        await timed("video V2 poll", requests, lambda i: http.get(f"/v2/videos/{video_id}", headers=HEADERS))
        await http.post("/_emulator/clock/advance", json={"seconds": 120})
        await timed(
            "video V2 content (4 s mp4)",
            requests,
            lambda i: http.get(f"/v2/videos/{video_id}/content", headers=HEADERS),
        )
        await timed(
            "typed judgment", requests, lambda i: http.post("/v1/typedjudge", headers=HEADERS, json=JUDGMENT)
        )
        await timed(
            "web search",
            requests,
            lambda i: http.get("/v1/websearch/search", params={"q": f"q{i}"}, headers=HEADERS),
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per route")
    asyncio.run(main(parser.parse_args().requests))
