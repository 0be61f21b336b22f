"""Image inputs: a local file path or base64 text in a row becomes an inline image part.

The same image is placed differently per protocol family, so this module returns the neutral
(mime type, base64) pair and `image_part` shapes it for the kind being built.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Magic numbers of the formats every family accepts; the gateway rejects other mime types.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}
# A path is short; base64 of even a tiny image is long. Above this, never try the file system.
_MAX_PATH_LENGTH = 1024


# Who is told of each image file read, and its bytes (a plan keeps their size and sha256, so a
# changed image is noticed on the next run: relaybatch/run/fingerprint.py).
_READS: ContextVar[Callable[[Path, bytes], None] | None] = ContextVar("image_reads", default=None)


@contextlib.contextmanager
def noting_image_reads(note: Callable[[Path, bytes], None]) -> Iterator[None]:
    """Call ``note(path, bytes)`` for every image file read inside the block (this context only)."""
    token = _READS.set(note)
    try:
        yield
    finally:
        _READS.reset(token)


class ImageInputError(ValueError):
    """An image input that is neither a readable image file nor base64 image bytes."""


@dataclass(frozen=True)
class InlineImage:
    mime_type: str
    data: str  # base64, as every family's inline part carries it

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.data}"


def sniff_mime_type(raw: bytes) -> str | None:
    for signature, mime_type in _SIGNATURES:
        if raw.startswith(signature):
            return mime_type
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


# Image types each kind's native route refuses (generate-content answers 400 "image/gif is not supported").
REFUSED_MIME_TYPES = {"generate_content": {"image/gif"}}


def refusal(kind: str, image: InlineImage) -> str | None:
    """Why the kind's route would refuse this image, or None."""
    if image.mime_type in REFUSED_MIME_TYPES.get(kind, set()):
        kind_name = kind.replace("_", "-")
        return f"is {image.mime_type}, which {kind_name} does not accept; convert it to PNG, JPEG or WEBP"
    return None


def load_image(value: Any, base_dir: Path, kind: str = "chat") -> InlineImage:
    """Read an image named by a path (relative to base_dir), a data URL, or base64 text, for `kind`."""
    image = _read_image(value, base_dir)
    reason = refusal(kind, image)
    if reason is not None:
        raise ImageInputError(reason)
    return image


def _read_image(value: Any, base_dir: Path) -> InlineImage:
    if not isinstance(value, str) or not value.strip():
        raise ImageInputError("is empty; give an image file path or base64 image bytes")
    text = value.strip()
    if text.startswith("data:") and ";base64," in text:
        return _from_base64(text.split(";base64,", 1)[1])
    if len(text) <= _MAX_PATH_LENGTH and (Path(text).suffix.lower() in _IMAGE_SUFFIXES or "/" in text):
        return _from_file(base_dir / text, text, base_dir)
    return _from_base64(text)


def _from_file(path: Path, shown: str, base_dir: Path) -> InlineImage:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ImageInputError(
            f"image file '{shown}' not found; check the path (paths are relative to {base_dir})"
        ) from None
    except OSError as error:
        raise ImageInputError(
            f"image file '{shown}' is unreadable ({error.strerror}); make it a file you may read"
        ) from None
    note = _READS.get()
    if note is not None:
        note(path, raw)
    mime_type = sniff_mime_type(raw)
    if mime_type is None:
        raise ImageInputError(f"'{shown}' is not a PNG, JPEG, GIF or WEBP image; convert it to one of those")
    return InlineImage(mime_type, base64.b64encode(raw).decode("ascii"))


def _from_base64(text: str) -> InlineImage:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageInputError(
            "is neither an image file path nor valid base64 image bytes; "
            "give the path of an image file or its bytes in base64"
        ) from None
    mime_type = sniff_mime_type(raw)
    if mime_type is None:
        raise ImageInputError(
            "decodes from base64 but is not a PNG, JPEG, GIF or WEBP image; encode one of those"
        )
    return InlineImage(mime_type, text)


def image_part(kind: str, image: InlineImage) -> dict[str, Any]:
    """The inline image part of one user turn, in the shape of the kind's protocol family."""
    if kind == "chat":
        return {"type": "image_url", "image_url": {"url": image.data_url}}
    if kind == "responses":
        return {"type": "input_image", "image_url": image.data_url}
    if kind == "messages":
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
        }
    if kind == "generate_content":
        return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}
    raise ImageInputError(
        f"kind '{kind}' takes no image input; use chat, responses, messages or generate_content"
    )
