"""Real, decodable image bytes for the image routes: a deterministic picture per seed, via Pillow.

The picture is a two-colour diagonal gradient whose colours come from the seed, so the same request
always returns the same bytes and different prompts look different. Size shortcut (documented in
docs/emulator.md): the picture is drawn with its longest edge capped at ``max_edge`` pixels and the
requested aspect ratio kept; the API response still reports the resolved size.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from functools import lru_cache
from typing import Literal

from PIL import Image

ImageFormat = Literal["png", "jpeg", "webp"]

MIME_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SIGNATURE = b"\xff\xd8\xff"


def sniff_image(data: bytes) -> str | None:
    """The MIME type of PNG, JPEG or WebP bytes, from their signature; None for anything else."""
    if data.startswith(PNG_SIGNATURE):
        return "image/png"
    if data.startswith(JPEG_SIGNATURE):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def render_dimensions(width: int, height: int, max_edge: int) -> tuple[int, int]:
    """The drawn size: the resolved size scaled down so its longest edge is at most ``max_edge``."""
    longest = max(width, height)
    if max_edge <= 0 or longest <= max_edge:
        return width, height
    scale = max_edge / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


def _colours(seed: bytes) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    digest = hashlib.sha256(seed).digest()
    return (digest[0], digest[1], digest[2]), (digest[3], digest[4], digest[5])


@lru_cache(maxsize=32)
def _ramp(width: int, height: int) -> Image.Image:
    """A diagonal 0-255 ramp of the given size (cached: a batch asks for the same sizes again)."""
    # Pillow's built-in 256x256 gradient, rotated and resized, beats per-pixel Python loops.
    return Image.linear_gradient("L").rotate(45, expand=False).resize((width, height))


def _blend_table(start: int, end: int) -> list[int]:
    """Lookup table mapping ramp value v to the colour start + (end - start) * v / 255."""
    return [start + (end - start) * value // 255 for value in range(256)]


def draw_picture(width: int, height: int, seed: bytes, *, transparent: bool) -> Image.Image:
    """A deterministic gradient picture; a transparent one fades out towards the bottom right."""
    start, end = _colours(seed)
    ramp = _ramp(width, height)
    channels = [ramp.point(_blend_table(s, e)) for s, e in zip(start, end, strict=True)]
    if transparent:
        channels.append(ramp.point(_blend_table(255, 0)))
        return Image.merge("RGBA", channels)
    return Image.merge("RGB", channels)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(picture: Image.Image) -> bytes:
    """A plain PNG (8-bit RGB or RGBA, no row filters), written directly with zlib.

    Pillow's PNG encoder spends most of its time choosing row filters; for these gradients the
    unfiltered rows compress nearly as well at a fifth of the time (benchmarks/emulator_media.py).
    """
    colour_type = 6 if picture.mode == "RGBA" else 2
    picture = picture if picture.mode in ("RGB", "RGBA") else picture.convert("RGB")
    row_bytes = picture.width * len(picture.mode)
    pixels = picture.tobytes()
    rows = b"".join(b"\x00" + pixels[start : start + row_bytes] for start in range(0, len(pixels), row_bytes))
    header = struct.pack(">IIBBBBB", picture.width, picture.height, 8, colour_type, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows, 1))
        + _png_chunk(b"IEND", b"")
    )


def encode_picture(picture: Image.Image, output_format: ImageFormat, compression: int) -> bytes:
    """Encode as PNG, JPEG or WebP; ``compression`` (0-100) is the quality of JPEG and WebP."""
    if output_format == "png":
        return encode_png(picture)
    buffer = io.BytesIO()
    if output_format == "jpeg":
        # JPEG has no alpha channel; the caller refuses transparent JPEG before we get here.
        picture.convert("RGB").save(buffer, format="JPEG", quality=max(1, min(compression, 95)))
    else:
        picture.save(buffer, format="WEBP", quality=compression, lossless=False, method=0)
    return buffer.getvalue()


def render_image(
    width: int,
    height: int,
    *,
    seed: bytes,
    output_format: ImageFormat,
    transparent: bool = False,
    compression: int = 100,
    max_edge: int = 256,
) -> bytes:
    """Image bytes for a resolved size, drawn at the (possibly reduced) render size."""
    drawn_width, drawn_height = render_dimensions(width, height, max_edge)
    picture = draw_picture(drawn_width, drawn_height, seed, transparent=transparent)
    return encode_picture(picture, output_format, compression)
