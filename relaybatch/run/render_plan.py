"""The poll plan of a manifest's video jobs, as `relaybatch plan` prints it (engine/poll_plan.py):
per job the videos, their expected render time, the gap between two polls of one video while the
run creates and after, and the batch's wall time, about, at the manifest's limit."""

from __future__ import annotations

from collections import Counter, defaultdict

from rich.table import Table

from relaybatch.console import table
from relaybatch.engine.poll_plan import ASSUMED_RPM, BatchPlan, plan_batch, video_seconds
from relaybatch.kinds import VIDEO_KINDS
from relaybatch.manifests import Manifest
from relaybatch.run.assemble import render_settings


def batch_plans(manifest: Manifest) -> dict[str, BatchPlan]:
    """Each video job's plan at the manifest's ``run.rate_limit_rpm`` (else 120 rpm)."""
    lengths: dict[str, Counter[int]] = defaultdict(Counter)
    models: dict[str, str] = {}
    for item in manifest.iter_items():
        if item.kind in VIDEO_KINDS:
            lengths[item.job][video_seconds(item.request)] += 1
            models.setdefault(item.job, str(item.request.get("model") or ""))
    settings = manifest.settings
    renders = render_settings(
        {
            "renders": {job.name: job.video for job in manifest.jobs if job.video},
            "max_in_flight": dict(settings.max_in_flight),
        }
    )
    rpm = float(settings.rate_limit_rpm or ASSUMED_RPM)
    plans = {}
    for job, counts in lengths.items():
        own = renders.job(job)
        caps = [cap for cap in (own.max_in_flight, renders.max_in_flight_per_model.get(models[job])) if cap]
        plans[job] = plan_batch(dict(counts), own, rpm, min(caps) if caps else None)
    return plans


def _duration(seconds: float) -> str:
    minutes, second = divmod(round(seconds), 60)
    return f"{minutes} min {second:02d} s" if minutes else f"{second} s"


def render_plan_table(manifest: Manifest) -> tuple[Table | None, str]:
    """The table of the video jobs' poll plans, and the line that says at which limit."""
    plans = batch_plans(manifest)
    if not plans:
        return None, ""
    shown = table(
        "job",
        "videos",
        "expected render",
        "in flight cap",
        "polls each",
        "poll gap creating",
        "poll gap after",
        "wall time, about",
        title="video jobs: poll plan",
    )
    for job, plan in plans.items():
        shown.add_row(
            job,
            str(plan.videos),
            _duration(plan.expected_seconds),
            str(plan.cap or "-"),
            f"{plan.polls_per_video:.0f}",
            _duration(plan.gap_while_submitting),
            _duration(plan.gap_after),
            _duration(plan.wall_seconds),
        )
    rpm = manifest.settings.rate_limit_rpm
    source = (
        f"{rpm} rpm (run.rate_limit_rpm)"
        if rpm
        else f"{ASSUMED_RPM:.0f} rpm (assumed: the manifest names no limit)"
    )
    line = (
        f"poll plan at {source}: each video's first poll goes half-way through its expected render to "
        "read its progress, the next when the progress says it ends (one poll once the run has measured "
        "renders of its model and length); polls get at least 30 % of the limit while the run creates, "
        "all of it after. Expected render: the job's video.expected_render_seconds, else 10 s + 10 s per "
        "second of video."
    )
    return shown, line
