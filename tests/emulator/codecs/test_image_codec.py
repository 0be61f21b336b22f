"""Image bytes: the drawn size keeps the aspect ratio under the render cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from relaybatch.emulator.codecs.images import render_dimensions


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
