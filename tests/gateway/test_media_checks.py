"""Saved media files are checked before anyone calls them done: length, MP4 boxes, image decode."""

from __future__ import annotations

import io
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from relaybatch.gateway.errors import BrokenResponse
from relaybatch.gateway.media import write_stream_to_file
from relaybatch.gateway.media_checks import MediaCheckFailed, check_media_file


def box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


MP4 = box(b"ftyp", b"isom\x00\x00\x02\x00isom") + box(b"moov", b"\x00" * 40) + box(b"mdat", b"\x01" * 500)


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def saved(tmp_path: Path, content: bytes, name: str = "file") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_a_whole_mp4_and_a_whole_png_pass(tmp_path: Path) -> None:
    check_media_file(saved(tmp_path, MP4), "video/mp4", str(len(MP4)))
    check_media_file(saved(tmp_path, png()), "image/png")


@pytest.mark.parametrize("cut", [len(MP4) // 2, len(MP4) - 1, 30, 4])
def test_an_mp4_cut_anywhere_fails(tmp_path: Path, cut: int) -> None:
    with pytest.raises(MediaCheckFailed):
        check_media_file(saved(tmp_path, MP4[:cut]), "video/mp4")


def test_an_mp4_without_its_movie_box_fails(tmp_path: Path) -> None:
    content = box(b"ftyp", b"isom") + box(b"mdat", b"\x01" * 10)
    with pytest.raises(MediaCheckFailed, match="moov"):
        check_media_file(saved(tmp_path, content), "video/mp4")


def test_a_64_bit_box_size_is_read(tmp_path: Path) -> None:
    large = struct.pack(">I4sQ", 1, b"mdat", 16 + 20) + b"\x00" * 20
    check_media_file(saved(tmp_path, box(b"ftyp", b"isom") + box(b"moov", b"") + large), "video/mp4")


def test_a_cut_png_fails_to_decode(tmp_path: Path) -> None:
    content = png()
    with pytest.raises(MediaCheckFailed, match="decode"):
        check_media_file(saved(tmp_path, content[: len(content) // 2]), "image/png")


def test_a_length_other_than_the_promised_one_fails(tmp_path: Path) -> None:
    with pytest.raises(MediaCheckFailed, match="Content-Length"):
        check_media_file(saved(tmp_path, b"ID3" + b"\x00" * 100), "audio/mpeg", "200")


async def chunks(content: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(content), 64):
        yield content[start : start + 64]


async def test_a_download_that_fails_its_check_is_a_broken_answer_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "media" / "video.mp4"
    with pytest.raises(BrokenResponse, match="not whole"):
        await write_stream_to_file(chunks(MP4[:300]), target, "300")
    assert not target.exists() and list(target.parent.iterdir()) == []

    written = await write_stream_to_file(chunks(MP4), target, str(len(MP4)))
    assert written.size == len(MP4) and target.read_bytes() == MP4
