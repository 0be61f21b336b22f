"""Poll scheduling: back-off with jitter, and intervals that stretch to fit a tight poll budget."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from relaybatch.engine import AdaptiveTokenBucket, PollSettings
from relaybatch.engine.poller import Poller


class _Execution:
    stop = asyncio.Event()
    run_stopped = None


def poller(settings: PollSettings, limiter: Any = None) -> Poller:
    return Poller(_Execution(), settings, limiter)  # type: ignore[arg-type]


def test_the_interval_grows_by_the_backoff_up_to_the_cap() -> None:
    polls = poller(PollSettings(initial_seconds=2, backoff=2, max_seconds=10, jitter=0))

    assert [polls.interval(n) for n in range(5)] == [2, 4, 8, 10, 10]
    assert polls.interval(10_000) == 10  # no overflow however long a video renders


def test_jitter_spreads_items_created_together() -> None:
    polls = poller(PollSettings(initial_seconds=10, jitter=0.2))
    intervals = {round(polls.interval(0), 6) for _ in range(50)}

    assert len(intervals) > 40
    assert all(8 <= value <= 12 for value in intervals)


async def test_a_tight_poll_budget_stretches_the_interval_instead_of_overflowing_the_bucket() -> None:
    # 120 requests per minute, 30 % for polls = 0.6 polls per second for 500 videos in flight.
    limiter = AdaptiveTokenBucket(120, poll_share=0.3)
    polls = poller(PollSettings(initial_seconds=5, jitter=0), limiter)
    for number in range(500):
        polls.add(f"key-{number}", "video", f"video-{number}", "submitted", delay=0)

    assert polls.interval(0) == pytest.approx(500 / 0.6)

    polls.submissions_over()  # no submissions left: polls may use the whole rate
    assert polls.interval(0) == pytest.approx(500 / 2.0)


async def test_when_submissions_end_polls_spaced_for_the_share_are_brought_forward() -> None:
    limiter = AdaptiveTokenBucket(120, poll_share=0.3)
    polls = poller(PollSettings(initial_seconds=5, jitter=0), limiter)
    for number in range(500):
        polls.add(f"key-{number}", "video", f"video-{number}", "submitted", delay=polls.interval(0))
    latest = max(entry.due for entry in polls.heap)

    polls.submissions_over()

    # The whole rate (~1.98 polls per second) now carries them: the last is due ~252 s from now,
    # not the ~842 s the poll share alone allowed, and no poll was pushed later.
    assert max(entry.due for entry in polls.heap) < latest
    assert max(entry.due for entry in polls.heap) - time.monotonic() == pytest.approx(500 / 2, rel=0.01)
