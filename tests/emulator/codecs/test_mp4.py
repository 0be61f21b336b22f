"""The hand-built MP4 files: box structure, duration, and a real decode when ffprobe is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from relaybatch.emulator.codecs.mp4 import FRAMES_PER_SECOND, build_mp4, frame_dimensions, iter_boxes
from tests.emulator.codecs.mp4_checks import check_h264_samples, check_mp4


@pytest.mark.parametrize(("width", "height", "seconds"), [(720, 1280, 4), (1792, 1024, 12), (1280, 720, 1)])
def test_mp4_structure_and_duration(width: int, height: int, seconds: int) -> None:
    facts = check_mp4(build_mp4(width, height, seconds, b"seed"))
    assert facts["duration_ms"] == seconds * 1000
    assert facts["frames"] == seconds * FRAMES_PER_SECOND
    assert (facts["width"] > facts["height"]) == (width > height)
    assert facts["width"] % 16 == 0 and facts["height"] % 16 == 0


@pytest.mark.parametrize(("width", "height", "seconds"), [(720, 1280, 4), (1792, 1024, 8)])
def test_h264_bitstream_syntax_of_every_frame(width: int, height: int, seconds: int) -> None:
    """Without ffmpeg at hand: every sample parses as an all-I_PCM IDR slice of the SPS's size."""
    assert check_h264_samples(build_mp4(width, height, seconds, b"syntax")) == seconds * FRAMES_PER_SECOND


def test_same_seed_same_file_other_seed_other_pictures() -> None:
    assert build_mp4(720, 1280, 4, b"a") == build_mp4(720, 1280, 4, b"a")
    assert build_mp4(720, 1280, 4, b"a") != build_mp4(720, 1280, 4, b"b")


def test_frame_dimensions_keep_the_orientation() -> None:
    assert frame_dimensions(720, 1280) == (3, 6)
    assert frame_dimensions(1280, 720) == (6, 3)


def test_broken_boxes_are_reported() -> None:
    with pytest.raises(ValueError, match="box size"):
        iter_boxes(b"\x00\x00\x00\x04moov")


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffprobe (ffmpeg) is not installed")
def test_ffprobe_decodes_every_frame(tmp_path: Path) -> None:
    path = tmp_path / "video.mp4"
    path.write_bytes(build_mp4(1280, 720, 4, b"decode"))
    result = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=codec_name,nb_read_frames",
            "-of",
            "csv=p=0",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stderr == ""
    assert result.stdout.strip() == f"h264,{4 * FRAMES_PER_SECOND}"
