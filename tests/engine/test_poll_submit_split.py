"""Polls and submissions share one bucket under the split: neither starves the other."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine_fakes import FAST, ClientFactory
from engine_items import chat, video

from relaybatch.engine import AdaptiveTokenBucket, CheckpointStore, PollSettings, execute


class LaneRecorder(AdaptiveTokenBucket):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lanes: list[str] = []

    async def acquire(self, purpose: Any = "submit") -> None:
        await super().acquire(purpose)
        self.lanes.append("poll" if purpose == "poll" else "submit")


async def test_videos_in_flight_neither_starve_submissions_nor_go_unpolled(
    store: CheckpointStore, make_client: ClientFactory
) -> None:
    # 1,800 requests per minute (30 per second), burst 1: every request waits its turn.
    bucket = LaneRecorder(1800, burst=1, poll_share=0.3)
    store.add_items([video(n) for n in range(6)] + [chat(n) for n in range(40)])
    # The videos would like a poll every 10 ms each: far more than their share.
    settings = replace(
        FAST, concurrency=8, poll=PollSettings(initial_seconds=0.01, max_seconds=0.01, jitter=0)
    )

    summary = await execute(store, make_client(limiter=bucket), settings=settings, limiter=bucket)

    assert summary.counts == {"done": 46}
    last_submission = max(index for index, lane in enumerate(bucket.lanes) if lane == "submit")
    while_submitting = bucket.lanes[: last_submission + 1]
    poll_fraction = while_submitting.count("poll") / len(while_submitting)
    assert 0.1 <= poll_fraction <= 0.4, poll_fraction  # polls got their share, and no more
    assert bucket.rate_limited == 0
