"""Long video batches (issue 28): polls per finished video, how long a finished render waits to be
seen, and how long the batch takes; optionally under a cap on videos in flight.

The emulator runs in this process with one account limited to ``--rpm`` requests per minute
(polls included) and videos whose render time follows their requested length, as a provider's does:
``--per-second`` seconds of rendering per second of video (15: a 4, 8 or 12 s video renders 60, 120
or 180 s), spread by ``--jitter`` either way. The videos' lengths cycle 4, 8, 12. The engine runs as
a user's run would: one shared bucket learning the limit from the first answer, 64 workers.

Each create and poll is recorded on its way out. Printed per run: polls per finished video beyond
its create, the detection delay (from the moment the emulator's clock says a render ended to the
answer of the poll that saw it: median, 90th percentile, largest), the batch's wall time from the
first create to the last video done, 429s; with ``--cap N`` the emulator refuses creates past N
videos of the model in flight (its concurrency error) and the run reports the most videos it ever
saw rendering at once and how many creates the cap refused.

This runs in real time (the engine's clock is the machine's; the emulator's clock has no scale):
200 videos take 4 to 6 minutes a run.

    .venv/bin/python benchmarks/video_polls.py [--videos 200] [--rpm 120] [--per-second 15] \\
        [--cap 0 [--known-cap]]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.config import AccountConfig
from relaybatch.engine import AdaptiveTokenBucket, CheckpointStore, EngineSettings, execute
from relaybatch.gateway import GatewayClient
from relaybatch.manifests import Item

KEY = "rb-video-polls-key"
MODEL = "relay-video-2"
LENGTHS = ("4", "8", "12")


class Recorder(httpx.AsyncBaseTransport):
    """Counts creates and polls per video, when each render was first seen finished, and the most
    videos rendering at once at the emulator (read from its own store at each create)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, app: Any) -> None:
        self.inner = inner
        self.app = app
        self.polls: dict[str, int] = defaultdict(int)
        self.seen_done: dict[str, float] = {}
        self.statuses: list[int] = []
        self.create_429s = 0
        self.first_create: float | None = None
        self.peak_rendering = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        response = await self.inner.handle_async_request(request)
        self.statuses.append(response.status_code)
        if request.method == "POST" and path == "/v2/videos":
            self.first_create = self.first_create or time.time()
            self.create_429s += response.status_code == 429
            self._sample_rendering()
        elif request.method == "GET" and path.startswith("/v2/videos/") and path.count("/") == 3:
            video_id = path.rsplit("/", 1)[1]
            self.polls[video_id] += 1
            await response.aread()
            if response.status_code == 200 and response.json().get("status") == "completed":
                self.seen_done.setdefault(video_id, time.time())
        return response

    def _sample_rendering(self) -> None:
        media = getattr(self.app.state, "media", None)
        if media is None:
            return
        now = self.app.state.emulator.clock.now()
        rendering = sum(1 for job in media.videos.values() if job.rendering(now))
        self.peak_rendering = max(self.peak_rendering, rendering)


def videos(count: int) -> list[Item]:
    return [
        Item.build(
            item_id=f"v{n}",
            job="videos",
            kind="video",
            request={
                "model": MODEL,
                "prompt": f"a lighthouse {n}",
                "seconds": LENGTHS[n % len(LENGTHS)],
                "size": "1280x720",
            },
        )
        for n in range(count)
    ]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(options: argparse.Namespace, folder: Path) -> None:
    config = load_config()
    config.accounts.append(
        AccountConfig(
            name="videos", api_keys=[KEY], balance_usd=Decimal("100000"), rate_limit_rpm=options.rpm
        )
    )
    config.media = {
        "video": {
            "queued_seconds": 0.0,
            "render_seconds_base": 0.0,
            "render_seconds_per_video_second": options.per_second,
            "render_jitter": options.jitter,
            "max_in_flight": options.cap,
        }
    }
    app = create_app(config)
    recorder = Recorder(httpx.ASGITransport(app=app), app)
    bucket = AdaptiveTokenBucket(None)
    store = CheckpointStore(folder / "checkpoint.sqlite")
    store.add_items(videos(options.videos))
    async with GatewayClient(
        "http://emulator.local", SecretStr(KEY), transport=recorder, limiter=bucket
    ) as client:
        settings = EngineSettings(concurrency=64)
        if options.known_cap:
            from relaybatch.engine.poll_plan import RenderSettings

            settings = EngineSettings(
                concurrency=64, renders=RenderSettings(max_in_flight_per_model={MODEL: options.cap})
            )
        summary = await execute(store, client, settings=settings, limiter=bucket)
    store.close()
    jobs = app.state.media.videos
    delays = [recorder.seen_done[vid] - jobs[vid].finished_at for vid in recorder.seen_done]
    done = len(recorder.seen_done)
    polls = sum(recorder.polls[vid] for vid in recorder.seen_done)
    wall = max(recorder.seen_done.values()) - (recorder.first_create or 0.0)
    told = " (known to the run)" if options.known_cap else ""
    cap = (
        f"; cap {options.cap}{told}: peak rendering {recorder.peak_rendering}, "
        f"creates refused {recorder.create_429s}"
    )
    print(
        f"{options.videos} videos ({', '.join(LENGTHS)} s at {options.per_second:g} s per second, jitter "
        f"{options.jitter:.0%}) at {options.rpm} rpm: {summary.counts}; {polls / max(1, done):.2f} polls per "
        f"finished video beyond the create; detection delay median {statistics.median(delays):.1f} s, "
        f"p90 {percentile(delays, 0.9):.1f} s, max {max(delays):.1f} s; batch {wall:.0f} s from the first "
        f"create to the last video seen done; 429s {recorder.statuses.count(429)}"
        f"{cap if options.cap else ''}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--videos", type=int, default=200)
    parser.add_argument("--rpm", type=int, default=120)
    parser.add_argument("--per-second", type=float, default=15.0)
    parser.add_argument("--jitter", type=float, default=0.05)
    parser.add_argument("--cap", type=int, default=0)
    parser.add_argument(
        "--known-cap",
        action="store_true",
        help="tell the run the cap (run.max_in_flight), not only the gateway",
    )
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="video-polls-"))
    try:
        asyncio.run(run(options, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
