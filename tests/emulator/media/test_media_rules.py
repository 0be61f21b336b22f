"""The pure rules behind the media routes: image sizes and traits, Gemini pixel sizes, video states."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaybatch.emulator.media.gemini_images import pixel_size
from relaybatch.emulator.media.image_rules import ImageModelTraits, parse_size
from relaybatch.emulator.media.video_v2 import VideoJob
from relaybatch.emulator.problems import InvalidRequest


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 240), st.integers(1, 240))
def test_custom_sizes_follow_the_aspect_rule(width_blocks: int, height_blocks: int) -> None:
    width, height = width_blocks * 16, height_blocks * 16
    allowed = width <= 3 * height and height <= 3 * width
    try:
        assert parse_size(f"{width}x{height}", max_edge=3840) == (width, height)
        assert allowed
    except InvalidRequest:
        assert not allowed


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4000), st.integers(1, 4000))
def test_sides_not_divisible_by_16_are_refused(width: int, height: int) -> None:
    if width % 16 and height % 16:
        with pytest.raises(InvalidRequest):
            parse_size(f"{width}x{height}", max_edge=10_000)


def test_size_cap() -> None:
    with pytest.raises(InvalidRequest, match="at most 2048"):
        parse_size("2064x2064", max_edge=2048)


def test_traits_from_options() -> None:
    newer = ImageModelTraits.from_options({"qualities": ["low", "medium", "high", "auto", "xhigh", "max"]})
    assert newer.newer and "max" in newer.qualities
    older = ImageModelTraits.from_options({"qualities": ["low", "standard", "hd"], "revised_prompt": True})
    assert not older.newer and older.revised_prompt and older.qualities == ("low",)


@pytest.mark.parametrize(("ratio", "size"), [("1:1", "1K"), ("16:9", "2K"), ("9:16", "4K"), ("21:9", "1K")])
def test_gemini_pixel_sizes_are_multiples_of_16_near_the_edge_squared(ratio: str, size: str) -> None:
    width, height = pixel_size(ratio, size)
    edge = {"1K": 1024, "2K": 2048, "4K": 4096}[size]
    assert width % 16 == 0 and height % 16 == 0
    assert abs(width * height - edge * edge) / (edge * edge) < 0.05
    across, down = (int(side) for side in ratio.split(":"))
    assert abs(width / height - across / down) < 0.05


ORDER = {"queued": 0, "in_progress": 1, "completed": 2, "failed": 2, "cancelled": 2}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 40, allow_nan=False), min_size=1, max_size=12),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 11)),
)
def test_video_states_only_move_forward(steps: list[float], fails: bool, cancel_at_step: int | None) -> None:
    job = VideoJob(
        id="video_x",
        account="demo",
        model="m",
        prompt="p",
        seconds=4,
        size="720x1280",
        quote_usd=Decimal("0.4"),
        created_at=0.0,
        render_seconds=18.0,
        queued_seconds=5.0,
        expires_after=3600.0,
        outcome="failed" if fails else "completed",
    )
    now, last_rank, last_progress = 0.0, 0, 0
    for index, step in enumerate(steps):
        now += step
        if index == cancel_at_step and job.status(now) in ("queued", "in_progress"):
            job.cancelled_at = now
        status, progress = job.status(now), job.progress(now)
        assert ORDER[status] >= last_rank and progress >= last_progress
        assert (progress == 100) == (status == "completed")
        last_rank, last_progress = ORDER[status], progress
