"""The poll plan (poll_plan.py): first poll near the expected end, the next from progress, back-off
without it, measured render times per model and length, deadlines."""

from __future__ import annotations

import pytest

from relaybatch.engine.poll_plan import (
    MIN_GAP_SECONDS,
    SLACK_SECONDS,
    RenderJob,
    RenderSettings,
    RenderTimes,
    default_render_seconds,
    first_delay,
    next_delay,
    video_seconds,
    watch_for,
)

VIDEO = {"model": "relay-video-2", "prompt": "waves", "seconds": "8"}
CAP = 60.0


def test_the_default_expectation_follows_the_requested_length() -> None:
    assert [default_render_seconds(seconds) for seconds in (4, 8, 12)] == [50, 90, 130]
    assert video_seconds({"seconds": "12"}) == 12 and video_seconds({"seconds": 20}) == 20
    assert video_seconds({}) == 4 and video_seconds({"seconds": "long"}) == 4


def test_nothing_measured_the_first_poll_reads_progress_half_way() -> None:
    watch = watch_for(VIDEO, "job", 100.0, RenderTimes(), RenderSettings())
    assert (watch.expected, watch.measured) == (90, False)
    assert first_delay(watch, 100.0, CAP) == 45


def test_a_measured_render_time_puts_the_first_poll_just_after_the_end() -> None:
    times = RenderTimes()
    for took in (118, 120, 125):
        times.learn("relay-video-2", 8, {"created_at": 1_000, "completed_at": 1_000 + took})
    times.learn("relay-video-2", 8, {"created_at": 1_000})  # no completion time: not a measure
    watch = watch_for(VIDEO, "job", 100.0, times, RenderSettings())
    # The upper fifth of what was measured: a first poll there finds most renders done.
    assert (watch.expected, watch.measured) == (125, True)
    assert first_delay(watch, 100.0, CAP) == 125 + SLACK_SECONDS
    # Another length of the same model is not measured yet.
    assert not watch_for({**VIDEO, "seconds": "4"}, "job", 100.0, times, RenderSettings()).measured


def test_progress_says_when_the_render_ends() -> None:
    watch = watch_for(VIDEO, "job", 0.0, RenderTimes(), RenderSettings())
    watch.seen("in_progress", 25, now=30.0)  # 25 % in 30 s: 90 s left
    assert next_delay(watch, 30.0, CAP) == pytest.approx(90 + SLACK_SECONDS)
    watch.seen("in_progress", 75, now=80.0)  # 50 points in 50 s: 25 s left
    assert next_delay(watch, 80.0, CAP) == pytest.approx(25 + SLACK_SECONDS)
    assert watch.last_status == "in_progress"


def test_without_progress_the_poll_waits_for_the_expected_end_then_backs_off() -> None:
    watch = watch_for(VIDEO, "job", 0.0, RenderTimes(), RenderSettings())
    watch.seen("queued", 0, now=45.0)  # no progress: nothing learned
    assert next_delay(watch, 45.0, CAP) == pytest.approx(45 + SLACK_SECONDS)
    gaps = [next_delay(watch, 100.0, CAP) for _ in range(6)]
    assert gaps[0] == 9 and gaps == sorted(gaps) and gaps[-1] == CAP


def test_gaps_are_bounded() -> None:
    watch = watch_for({**VIDEO, "seconds": "12"}, "job", 0.0, RenderTimes(), RenderSettings())
    watch.seen("in_progress", 1, now=10.0)  # 1 % in 10 s: ~990 s left, planned gaps stop at 2 x cap
    assert next_delay(watch, 10.0, CAP) == 2 * CAP
    watch.seen("in_progress", 99.99, now=600.0)
    assert next_delay(watch, 600.0, CAP) == MIN_GAP_SECONDS  # never a busy loop
    assert next_delay(watch, 600.0, 0.05) == 0.1  # fast test settings: twice the cap wins


def test_deadlines_default_from_the_expectation_and_follow_the_job() -> None:
    settings = RenderSettings({"slow": RenderJob(expected_render_seconds=600, render_deadline_seconds=1800)})
    default = watch_for(VIDEO, "job", 0.0, RenderTimes(), settings)
    assert default.deadline == 900 and not default.stuck(900) and default.stuck(901)
    own = watch_for(VIDEO, "slow", 0.0, RenderTimes(), settings)
    assert (own.expected, own.deadline) == (600, 1800)
    long = watch_for(
        VIDEO, "job", 0.0, RenderTimes(), RenderSettings({"job": RenderJob(expected_render_seconds=200)})
    )
    assert long.deadline == 8 * 200


def test_progress_of_running_renders_measures_a_kind_until_one_finishes() -> None:
    times = RenderTimes()
    assert times.learn_progress("relay-video-2", 8, age=30.0, progress=25)  # 120 s in all
    assert not times.learn_progress("relay-video-2", 8, age=30.0, progress=0)  # queued: no measure
    assert times.measured("relay-video-2", 8) == 120
    # A finished render is a better measure, and never more than the poller saw (whole seconds).
    assert times.learn("relay-video-2", 8, {"created_at": 0, "completed_at": 118}, observed=117.5)
    assert times.measured("relay-video-2", 8) == 117.5
    assert not times.learn_progress("relay-video-2", 8, age=10.0, progress=50)


async def test_a_measure_moves_waiting_first_polls_and_their_deadlines() -> None:
    import asyncio

    from relaybatch.engine.poller import Poller, PollSettings

    class _Execution:
        stop = asyncio.Event()
        run_stopped = None

    poller = Poller(_Execution(), PollSettings(), renders=RenderSettings())  # type: ignore[arg-type]
    for n in range(3):
        poller.add(f"key-{n}", "video", f"video-{n}", "submitted", request=VIDEO, job="job")
    [first, *_] = sorted(poller.heap)
    assert first.watch is not None and first.watch.deadline == 900  # from the 90 s guess
    # One render of the kind reports 2 % after 24 s: it takes about 1,200 s.
    assert poller.times.learn_progress("relay-video-2", 8, age=24.0, progress=2)
    poller._replan(first.watch)
    for entry in poller.heap:
        assert entry.watch is not None and entry.watch.measured
        assert entry.watch.expected == 1200 and entry.watch.deadline == 8 * 1200
        assert entry.due - entry.watch.created == pytest.approx(1200 + SLACK_SECONDS)
