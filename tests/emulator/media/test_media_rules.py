"""The pure rules behind the media routes: sizes, tokens, render sizes, judgments, search results."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaybatch.emulator.media as media
from relaybatch.emulator.media.gemini_images import pixel_size
from relaybatch.emulator.media.image_codec import render_dimensions
from relaybatch.emulator.media.images import ImageModelTraits, parse_size
from relaybatch.emulator.media.judgment import answer_question
from relaybatch.emulator.media.problems import InvalidMediaRequest
from relaybatch.emulator.media.video_v2 import VideoJob
from relaybatch.emulator.media.websearch import organic_results, took_ms


def test_exported_names() -> None:
    assert sorted(media.__all__) == ["generate_content_image_reply", "routes"]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 240), st.integers(1, 240))
def test_custom_sizes_follow_the_aspect_rule(width_blocks: int, height_blocks: int) -> None:
    width, height = width_blocks * 16, height_blocks * 16
    allowed = width <= 3 * height and height <= 3 * width
    try:
        assert parse_size(f"{width}x{height}", max_edge=3840) == (width, height)
        assert allowed
    except InvalidMediaRequest:
        assert not allowed


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4000), st.integers(1, 4000))
def test_sides_not_divisible_by_16_are_refused(width: int, height: int) -> None:
    if width % 16 and height % 16:
        with pytest.raises(InvalidMediaRequest):
            parse_size(f"{width}x{height}", max_edge=10_000)


def test_size_cap() -> None:
    with pytest.raises(InvalidMediaRequest, match="at most 2048"):
        parse_size("2064x2064", max_edge=2048)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 240), st.integers(1, 240), st.sampled_from([0, 64, 256, 1024]))
def test_render_dimensions_keep_aspect_and_cap(width_blocks: int, height_blocks: int, max_edge: int) -> None:
    width, height = width_blocks * 16, height_blocks * 16
    drawn_width, drawn_height = render_dimensions(width, height, max_edge)
    if max_edge == 0 or max(width, height) <= max_edge:
        assert (drawn_width, drawn_height) == (width, height)
    else:
        assert max(drawn_width, drawn_height) == max_edge
        # The short side is scaled the same way, rounded to whole pixels, never below one.
        scale = max_edge / max(width, height)
        assert min(drawn_width, drawn_height) == max(1, round(min(width, height) * scale))


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


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=50), st.integers(2, 10))
def test_score_answers_stay_in_range(state: str, levels: int) -> None:
    question = {"type": "score", "instructions": "rate", "criteria": [f"level {i}" for i in range(levels)]}
    answer = answer_question(state, "q", question)
    assert 0 <= answer["score"] <= levels - 1
    assert all(0 <= p <= 1 for p in answer["probabilities"].values())
    assert abs(sum(answer["probabilities"].values()) - 1) <= 0.01 * levels
    assert 0 <= answer["confidence"] <= 1


def test_search_results_are_deterministic_and_sized() -> None:
    assert organic_results("search", "q", 3) == organic_results("search", "q", 3)
    assert len(organic_results("search-news", "q", 7)) == 7
    assert took_ms("search", "q") == took_ms("search", "q")


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
        fails=fails,
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
