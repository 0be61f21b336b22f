"""The poll plan of paid remote renders (V2 videos, V1 tasks): when to ask about each one, and when
it counts as stuck.

A render's length follows what was asked for: a provider renders a 12 s video for longer than a 4 s
one. So each item has an **expected render time**: the run's own measure for its model and length
once one has finished or reported progress (RenderTimes), else the job's
``expected_render_seconds``, else ``10 + 10 x seconds``. Its polls are
spent where results are:

1. The first poll goes at the expected time (plus ``SLACK_SECONDS``, at most a tenth of it) when the
   run has measured renders of this kind; else at half of it, to read the render's ``progress``.
   The first measure of a kind moves the first polls of the renders of that kind still waiting
   for theirs (``Poller`` re-plans them), so only the first renders of a kind pay for a probe.
2. A running answer with progress (``0 < progress < 100``) says when it will end: the rate between
   two readings (or since the create, for the first) gives the time left, and the next poll goes
   then.
3. Without progress, the next poll goes at the expected time, then backs off from a tenth of it.
4. A gap planned from a guess or progress (1, 2) is at most ``PLANNED_CAP`` x
   ``PollSettings.max_seconds`` (120 s by default), a back-off gap (3) at most ``max_seconds``: a
   wrong estimate costs a poll, not many minutes.

Measured (benchmarks/video_polls.py, RESULTS.md): 200 videos of 60-180 s at 1,200 rpm are seen
with about 2 polls each, a second or two after they end.

Past its **render deadline** (``render_deadline_seconds`` of the job, else ``max(900, 8 x
expected)``) an item is **stuck**: it is named in the live display and in `relaybatch status` with
its age and last status, and polled every ``PollSettings.stuck_seconds`` (policy ``keep``, the
default) or cancelled at the gateway (policy ``cancel``). A run whose only open items are stuck ends
by itself (runner.py).

``plan_batch`` is the same plan as `relaybatch plan` states it before a run: per video job the
expected render time, the gap between two polls of one video while creating and after (at the
manifest's limit, else the interface's example of 120 rpm), and the batch's wall time, about.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_RENDER_BASE_SECONDS = 10.0
DEFAULT_RENDER_SECONDS_PER_VIDEO_SECOND = 10.0
DEFAULT_VIDEO_SECONDS = 4  # V2's default length; a V1 task without `seconds` is taken as this long
PROBE_SHARE = 0.5  # nothing measured yet: the first poll reads progress half-way
SLACK_SECONDS = 1.5  # after the moment a render should end: gateways round times to the second
MIN_GAP_SECONDS = 2.0
PLANNED_CAP = 2.0
DEADLINE_FLOOR_SECONDS = 900.0
DEADLINE_FACTOR = 8.0
LEARNED_KEEP = 50  # the measures kept per model and length
MEASURED_QUANTILE = 0.8

OnDeadline = Literal["keep", "cancel"]


@dataclass(frozen=True)
class RenderJob:
    """A job's own render settings (manifest ``video:``); None means the default."""

    expected_render_seconds: float | None = None
    render_deadline_seconds: float | None = None
    on_deadline: OnDeadline = "keep"
    max_in_flight: int | None = None  # this job's renders created and not finished (render_slots.py)


@dataclass(frozen=True)
class RenderSettings:
    """Render settings of a run, by job name; caps on renders in flight per model."""

    jobs: dict[str, RenderJob] = field(default_factory=dict)
    max_in_flight_per_model: dict[str, int] = field(default_factory=dict)

    def job(self, name: str) -> RenderJob:
        return self.jobs.get(name) or RenderJob()


def video_seconds(request: dict[str, Any]) -> int:
    """The requested length in seconds (V2 sends a string, V1 an integer); the default if unreadable."""
    try:
        return max(1, int(request.get("seconds") or DEFAULT_VIDEO_SECONDS))
    except (TypeError, ValueError):
        return DEFAULT_VIDEO_SECONDS


def default_render_seconds(seconds: int) -> float:
    return DEFAULT_RENDER_BASE_SECONDS + DEFAULT_RENDER_SECONDS_PER_VIDEO_SECOND * seconds


class RenderTimes:
    """What this run measured, per (model, requested seconds): render times of finished renders
    (``completed_at - created_at`` as the gateway reports them, in whole seconds, and never more
    than the poller saw), else estimates from running renders' progress (``age x 100 / progress``).
    The expected time of a kind is the ``MEASURED_QUANTILE`` of them: a first poll there finds most
    renders of the kind finished."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, int], deque[float]] = defaultdict(lambda: deque(maxlen=LEARNED_KEEP))
        self._running: dict[tuple[str, int], deque[float]] = defaultdict(lambda: deque(maxlen=LEARNED_KEEP))

    def learn(self, model: str, seconds: int, remote: dict[str, Any], observed: float | None = None) -> bool:
        """Record a finished render; True when the kind's expected time changed."""
        created, completed = remote.get("created_at"), remote.get("completed_at")
        if (
            not (isinstance(created, int | float) and isinstance(completed, int | float))
            or completed < created
        ):
            return False
        took = float(completed - created)
        before = self.measured(model, seconds)
        self._done[(model, seconds)].append(took if observed is None else min(took, observed))
        return self.measured(model, seconds) != before

    def learn_progress(self, model: str, seconds: int, age: float, progress: Any) -> bool:
        """Record a running render's progress as an estimate of its whole time (no finished render
        of the kind yet); True when the kind's expected time changed."""
        key = (model, seconds)
        if self._done.get(key) or not isinstance(progress, int | float) or not 0 < progress < 100 or age <= 0:
            return False
        before = self.measured(model, seconds)
        self._running[key].append(age * 100.0 / progress)
        return self.measured(model, seconds) != before

    def measured(self, model: str, seconds: int) -> float | None:
        seen = self._done.get((model, seconds)) or self._running.get((model, seconds))
        if not seen:
            return None
        ordered = sorted(seen)
        return ordered[min(len(ordered) - 1, int(MEASURED_QUANTILE * len(ordered)))]


@dataclass
class RenderWatch:
    """One item's render as the poller follows it (times in the poller's monotonic seconds)."""

    model: str
    seconds: int
    job: str
    created: float
    expected: float
    deadline: float
    measured: bool  # the expected time comes from this run's finished renders
    name: str = ""  # the item's id, as the user wrote it (displays name it)
    last_status: str | None = None
    progress: float | None = None
    progress_at: float | None = None
    rate: float | None = None  # progress points per second, from the last two readings
    overdue_polls: int = 0

    def seen(self, status: str | None, progress: Any, now: float) -> None:
        self.last_status = status or self.last_status
        if not isinstance(progress, int | float) or not 0 < progress < 100:
            return
        if self.progress is not None and self.progress_at is not None and progress > self.progress:
            self.rate = (progress - self.progress) / max(1e-6, now - self.progress_at)
        elif self.rate is None:
            self.rate = progress / max(1e-6, now - self.created)
        self.progress, self.progress_at = float(progress), now

    @property
    def slack(self) -> float:
        """How long after the expected end to ask: gateways round times to whole seconds."""
        return min(SLACK_SECONDS, 0.1 * self.expected)

    def stuck(self, now: float) -> bool:
        return now - self.created > self.deadline


def deadline_for(own: RenderJob, expected: float) -> float:
    """The job's render deadline, else ``max(900 s, 8 x expected)``."""
    return own.render_deadline_seconds or max(DEADLINE_FLOOR_SECONDS, DEADLINE_FACTOR * expected)


def watch_for(
    request: dict[str, Any],
    job: str,
    created: float,
    times: RenderTimes,
    settings: RenderSettings,
    name: str = "",
) -> RenderWatch:
    model, seconds = str(request.get("model") or ""), video_seconds(request)
    own = settings.job(job)
    measured = times.measured(model, seconds)
    expected = (
        measured if measured is not None else own.expected_render_seconds or default_render_seconds(seconds)
    )
    deadline = deadline_for(own, expected)
    return RenderWatch(model, seconds, job, created, expected, deadline, measured is not None, name)


def first_delay(watch: RenderWatch, now: float, max_seconds: float) -> float:
    """Seconds from ``now`` to the first poll of a render."""
    if watch.measured:  # this run saw renders of this kind end: trust it
        return max(min(MIN_GAP_SECONDS, max_seconds), watch.created + watch.expected + watch.slack - now)
    return _bounded(watch.created + watch.expected * PROBE_SHARE - now, PLANNED_CAP * max_seconds)


def next_delay(watch: RenderWatch, now: float, max_seconds: float, backoff: float = 1.5) -> float:
    """Seconds from ``now`` to the next poll of a render a poll found still running."""
    if watch.progress is not None and watch.rate:
        left = (100.0 - watch.progress) / watch.rate
        return _bounded(left + watch.slack, PLANNED_CAP * max_seconds)
    age = now - watch.created
    if age < watch.expected:
        return _bounded(watch.expected - age + watch.slack, PLANNED_CAP * max_seconds)
    watch.overdue_polls += 1
    gap = max(MIN_GAP_SECONDS, 0.1 * watch.expected) * backoff ** min(watch.overdue_polls - 1, 30)
    return _bounded(gap, max_seconds)


def _bounded(seconds: float, max_seconds: float) -> float:
    return min(max_seconds, max(min(MIN_GAP_SECONDS, max_seconds), seconds))


# -- what `relaybatch plan` says about a video job ---------------------------------------------

ASSUMED_RPM = 120.0  # the interface's example limit, when the manifest names none
POLL_SHARE = 0.3  # the limiter's guaranteed share for polls while submissions go on (limiter.py)
PLANNED_POLLS_PER_VIDEO = 2.0  # half-way (progress) and at the end; 1 once the run measured the kind


@dataclass(frozen=True)
class BatchPlan:
    """A video job's poll plan at a request limit: what `relaybatch plan` prints."""

    videos: int
    expected_seconds: float  # mean expected render time of its items
    longest_seconds: float
    rpm: float
    cap: int | None
    polls_per_video: float
    gap_while_submitting: float  # seconds between two polls of one video at worst, while creating
    gap_after: float  # the same once every create is sent
    wall_seconds: float  # from the first create to the last render seen done, about


def plan_batch(lengths: dict[int, int], job: RenderJob, rpm: float, cap: int | None) -> BatchPlan:
    """``lengths`` maps requested seconds to how many of the job's items ask for them."""
    videos = sum(lengths.values())
    expected = {
        seconds: job.expected_render_seconds or default_render_seconds(seconds) for seconds in lengths
    }
    mean = sum(expected[seconds] * count for seconds, count in lengths.items()) / max(1, videos)
    longest = max(expected.values(), default=0.0)
    rate = rpm / 60.0
    polls = PLANNED_POLLS_PER_VIDEO
    # Renders in flight while creating: as many as are created during one render, or the cap.
    creating = rate * (1.0 - POLL_SHARE)
    in_flight = min(videos, cap or videos, max(1.0, creating * mean))
    planned_gap = mean / polls
    gap_while = max(planned_gap, in_flight / (rate * POLL_SHARE))
    gap_after = max(planned_gap, min(videos, cap or videos) / rate)
    requests = videos * (1.0 + polls)
    wall = max(requests / rate, videos * mean / cap if cap else 0.0) + longest
    return BatchPlan(videos, mean, longest, rpm, cap, polls, gap_while, gap_after, wall)
