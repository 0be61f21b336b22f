"""Real, decodable image bytes for the image routes: a deterministic picture per seed, via Pillow.

The picture is a two-colour diagonal gradient whose colours come from the seed, so the same request
always returns the same bytes and different prompts look different. Size shortcut (documented in
docs/emulator.md): the picture is drawn with its longest edge capped at ``max_edge`` pixels and the
requested aspect ratio kept; the API response still reports the resolved size.
"""

from __future__ import annotations

import hashlib
import io
from typing import Literal

from PIL import Image

ImageFormat = Literal["png", "jpeg", "webp"]

MIME_TYPES: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
_PIL_FORMATS: dict[str, str] = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}


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


def draw_picture(width: int, height: int, seed: bytes, *, transparent: bool) -> Image.Image:
    """A deterministic gradient picture; a transparent one fades out towards the bottom right."""
    start, end = _colours(seed)
    # Pillow's built-in 256x256 gradient, resized, is much faster than per-pixel Python loops.
    ramp = Image.linear_gradient("L").rotate(45, expand=False).resize((width, height))
    bands = [Image.new("L", (width, height), s) for s in start]
    ends = [Image.new("L", (width, height), e) for e in end]
    channels = [Image.composite(e, s, ramp) for s, e in zip(bands, ends, strict=True)]
    if transparent:
        alpha = ramp.point(lambda value: 255 - value)
        return Image.merge("RGBA", [*channels, alpha])
    return Image.merge("RGB", channels)


def encode_picture(picture: Image.Image, output_format: ImageFormat, compression: int) -> bytes:
    """Encode as PNG, JPEG or WebP; ``compression`` (0-100) is the quality of JPEG and WebP."""
    buffer = io.BytesIO()
    if output_format == "png":
        picture.save(buffer, format="PNG", optimize=False)
    elif output_format == "jpeg":
        # JPEG has no alpha channel; the caller refuses transparent JPEG before we get here.
        picture.convert("RGB").save(buffer, format="JPEG", quality=max(1, min(compression, 95)))
    else:
        picture.save(buffer, format="WEBP", quality=compression, lossless=False)
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
