"""Many videos in flight under a tight limit (issue 19, target 5): do polls starve submissions, and
how long does a video wait between two polls?

The emulator runs in this process with an account limited to ``--rpm`` requests per minute (its
sliding 60 s window, polls included) and videos that render for ``--render-seconds``, so every
video submitted is still in flight when the last one is submitted. The engine runs as a user's run
would: one shared bucket (limit learned from the first answer), 64 workers, the poller fitting its
intervals to its share of the bucket. Each create and each poll is recorded on the way out. The
run stops ``--after-submit-seconds`` after the last create (as Ctrl-C would).

Printed: creates per minute while submitting, against the limit and against the submissions'
guaranteed share (1 - poll_share); the largest gap between two polls of one video (its first poll
counted from its create) while submissions went on, and after; requests refused with 429.

Arithmetic that bounds the second target: N videos polled every G seconds need N / G polls per
second. At 120 requests per minute (2 per second) a 60 s gap is possible for at most 120 videos
in flight even with every request spent on polls; 500 in flight cannot all be polled every 60 s
at that limit (at best every 250 s, and every ~840 s while submissions keep their 70 %).

    .venv/bin/python benchmarks/poll_fairness.py [--videos 500] [--rpm 120] [--render-seconds 1200]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import tempfile
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import httpx
from pydantic import SecretStr

from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.config import AccountConfig
from relaybatch.engine import AdaptiveTokenBucket, CheckpointStore, EngineSettings, execute
from relaybatch.gateway import GatewayClient
from relaybatch.manifests import Item

KEY = "rb-poll-fairness-key"
POLL_SHARE = 0.3


class Recorder(httpx.AsyncBaseTransport):
    """Notes when each video create and each video poll leaves, and each answer's status."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.creates: list[float] = []
        self.polls: dict[str, list[float]] = defaultdict(list)
        self.created: dict[str, float] = {}
        self.statuses: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        now = time.monotonic()
        path = request.url.path
        if request.method == "GET" and path.startswith("/v2/videos/") and path.count("/") == 3:
            self.polls[path.rsplit("/", 1)[1]].append(now)
        response = await self.inner.handle_async_request(request)
        self.statuses.append(response.status_code)
        if request.method == "POST" and path == "/v2/videos" and response.status_code == 200:
            self.creates.append(now)
            await response.aread()
            self.created[response.json()["id"]] = now
        return response


def videos(count: int) -> list[Item]:
    return [
        Item.build(
            item_id=f"v{n}",
            job="videos",
            kind="video",
            request={
                "model": "relay-video-2",
                "prompt": f"a lighthouse {n}",
                "seconds": "4",
                "size": "1280x720",
            },
        )
        for n in range(count)
    ]


def largest_gaps(recorder: Recorder, split: float, end: float) -> tuple[float, float]:
    """The largest wait for a poll before ``split`` (last create) and after it, over all videos."""
    during, after = 0.0, 0.0
    for video_id, created in recorder.created.items():
        moments = [created, *recorder.polls.get(video_id, []), end]
        for earlier, later in itertools.pairwise(moments):
            gap = later - earlier
            if later <= split:
                during = max(during, gap)
            else:
                after = max(after, gap)
    return during, after


async def run(count: int, rpm: int, render_seconds: float, after_submit: float, folder: Path) -> None:
    config = load_config()
    config.accounts.append(
        AccountConfig(name="videos", api_keys=[KEY], balance_usd=Decimal("100000"), rate_limit_rpm=rpm)
    )
    config.media = {"video": {"queued_seconds": 1.0, "render_seconds_base": render_seconds}}
    recorder = Recorder(httpx.ASGITransport(app=create_app(config)))
    bucket = AdaptiveTokenBucket(None, poll_share=POLL_SHARE)
    store = CheckpointStore(folder / "checkpoint.sqlite")
    store.add_items(videos(count))
    stop = asyncio.Event()

    async def stop_after_the_last_create() -> None:
        while len(recorder.creates) < count:
            await asyncio.sleep(0.5)
        await asyncio.sleep(after_submit)
        stop.set()

    async with GatewayClient(
        "http://emulator.local", SecretStr(KEY), transport=recorder, limiter=bucket
    ) as client:
        watcher = asyncio.create_task(stop_after_the_last_create())
        started = time.monotonic()
        await execute(store, client, settings=EngineSettings(concurrency=64), limiter=bucket, stop=stop)
        watcher.cancel()
    store.close()
    end = time.monotonic()
    first, last = recorder.creates[0], recorder.creates[-1]
    submit_rpm = (len(recorder.creates) - 1) / max(1e-9, last - first) * 60
    guaranteed = rpm * (1 - POLL_SHARE)
    during, after = largest_gaps(recorder, last, end)
    polls = sum(len(times) for times in recorder.polls.values())
    print(
        f"{count} videos at {rpm} rpm (render {render_seconds:.0f} s), {end - started:.0f} s: "
        f"creates {submit_rpm:.1f}/min while submitting = {submit_rpm / rpm:.0%} of the limit, "
        f"ratio to the submissions' guaranteed share ({guaranteed:.1f}/min) {submit_rpm / guaranteed:.2f}; "
        f"{polls} polls; largest wait for a poll {during:.0f} s while submitting, {after:.0f} s after "
        f"(target 60 s, ratio {max(during, after) / 60:.1f}; the limit allows no less than "
        f"{count / (rpm / 60):.0f} s for {count} videos); 429s {recorder.statuses.count(429)}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--videos", type=int, default=500)
    parser.add_argument("--rpm", type=int, default=120)
    parser.add_argument("--render-seconds", type=float, default=1200.0)
    parser.add_argument("--after-submit-seconds", type=float, default=300.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="poll-fairness-"))
    try:
        asyncio.run(
            run(options.videos, options.rpm, options.render_seconds, options.after_submit_seconds, folder)
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
