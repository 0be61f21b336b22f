"""Media helpers: base64 images and inline parts to bytes with their type; files written whole.

The media type is read from the bytes' own signature first, because a declared type can be wrong
(an ``output_format`` default, a proxy's label), and a caller saving ``.png`` needs to know.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from relaybatch.files import replaced_atomically
from relaybatch.gateway.errors import BrokenResponse
from relaybatch.gateway.generate_content_types import GenerateContentResponse
from relaybatch.gateway.media_checks import MediaCheckFailed, check_media_file
from relaybatch.gateway.media_types import ImagesResponse

_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "image/png"),
    (0, b"\xff\xd8\xff", "image/jpeg"),
    (0, b"GIF8", "image/gif"),
    (4, b"ftyp", "video/mp4"),
    (0, b"\x1a\x45\xdf\xa3", "video/webm"),
    (0, b"ID3", "audio/mpeg"),
)


@dataclass(frozen=True)
class MediaBytes:
    data: bytes
    media_type: str

    @property
    def extension(self) -> str:
        known = {"image/jpeg": "jpg", "audio/mpeg": "mp3", "application/octet-stream": "bin"}
        return known.get(self.media_type, self.media_type.split("/")[-1])


@dataclass(frozen=True)
class MediaFile:
    path: Path
    media_type: str | None
    size: int


def sniff_media_type(data: bytes) -> str | None:
    """The media type from the file signature, or None when it is not one we know."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for offset, signature, media_type in _SIGNATURES:
        if data[offset : offset + len(signature)] == signature:
            return media_type
    return None


def decode_base64_media(text: str, declared_type: str | None = None) -> MediaBytes:
    """Bytes and media type of a base64 payload; a clear ValueError when it is not base64."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"media payload is not valid base64 ({len(text)} characters)") from exc
    media_type = sniff_media_type(data) or declared_type or "application/octet-stream"
    return MediaBytes(data, media_type)


def images_from_result(result: ImagesResponse) -> list[MediaBytes]:
    """Every image of an image-generation answer, in order."""
    declared = f"image/{result.output_format}".replace("jpg", "jpeg") if result.output_format else None
    return [decode_base64_media(image.b64_json, declared) for image in result.data]


def inline_media(response: GenerateContentResponse) -> list[MediaBytes]:
    """Every ``inlineData`` part of every candidate; empty for a refusal (text only, safety stop)."""
    return [
        decode_base64_media(part.inlineData.data, part.inlineData.mimeType)
        for candidate in response.candidates
        for part in candidate.content.parts
        if part.inlineData is not None
    ]


async def write_stream_to_file(
    chunks: AsyncIterator[bytes], path: Path, content_length: str | None = None
) -> MediaFile:
    """Write chunks to ``path`` through a temporary name, so a failed download never looks complete.

    The file is checked (media_checks.py: length against ``content_length``, MP4 boxes, image
    decode) before it takes its name; a file that fails is a ``BrokenResponse``, which is retried
    like any answer cut off mid-body."""
    size, head = 0, b""
    with replaced_atomically(path) as partial:
        with open(partial, "wb") as handle:
            async for chunk in chunks:
                if len(head) < 16:
                    head += chunk[: 16 - len(head)]
                handle.write(chunk)
                size += len(chunk)
        media_type = sniff_media_type(head)
        try:
            check_media_file(partial, media_type, content_length)
        except MediaCheckFailed as error:
            raise BrokenResponse(f"download to {path.name} is not whole: {error}") from None
    return MediaFile(path, media_type, size)
