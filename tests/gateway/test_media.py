"""Media helpers: bytes and type from base64 and inline parts, files written whole or not at all."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from relaybatch.gateway import decode_base64_media
from relaybatch.gateway.media import sniff_media_type, write_stream_to_file


def _image(kind: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "teal").save(buffer, format=kind)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("kind", "media_type"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")]
)
def test_type_comes_from_the_bytes(kind: str, media_type: str) -> None:
    data = _image(kind)
    decoded = decode_base64_media(base64.b64encode(data).decode(), declared_type="image/png")
    assert decoded.data == data and decoded.media_type == media_type


def test_declared_type_is_used_when_the_bytes_are_unknown() -> None:
    decoded = decode_base64_media(base64.b64encode(b"plain bytes").decode(), "audio/wav")
    assert decoded.media_type == "audio/wav"
    assert sniff_media_type(b"....ftypisom") == "video/mp4"


def test_bad_base64_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not valid base64"):
        decode_base64_media("!!not base64!!")


async def test_failed_download_leaves_no_file(tmp_path: Path) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"\x00\x00\x00\x18ftypmp42"
        raise OSError("connection reset")

    with pytest.raises(OSError):
        await write_stream_to_file(chunks(), tmp_path / "clip.mp4")
    assert list(tmp_path.iterdir()) == []
