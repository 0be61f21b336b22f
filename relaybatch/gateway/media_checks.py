"""Checks a saved media file must pass before anyone calls it done.

A download can end early and still look complete: a proxy that cuts the body and fixes the
``Content-Length`` to match, or a 200 whose stream simply stops. So every downloaded file is
checked before it takes its final name: its length against the ``Content-Length`` the answer
promised, then its own structure by type. An MP4 (ISO base media file) is a chain of boxes, each
starting with its size: the boxes must tile the file exactly, start with ``ftyp`` and include
``moov`` and ``mdat``. An image must decode completely with Pillow. Other types (audio, WebM) are
checked by length only. A file that fails raises ``MediaCheckFailed`` naming what is wrong; the
download is then repeated (the client's retry, or the engine's next poll).
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

from PIL import Image

# Types whose files are ISO base media (box) files.
BOX_FILE_TYPES = frozenset({"video/mp4", "video/quicktime", "audio/mp4"})
# Boxes every playable MP4 has at the top level.
REQUIRED_BOXES = (b"ftyp", b"moov", b"mdat")


class MediaCheckFailed(ValueError):
    """A saved media file is not whole: short, cut off mid-box, or an image that does not decode."""


def check_length(size: int, content_length: str | None) -> None:
    if content_length is None:
        return
    try:
        expected = int(content_length)
    except ValueError:
        return
    if size != expected:
        raise MediaCheckFailed(f"{size} bytes saved, the answer's Content-Length says {expected}")


def check_box_structure(path: Path) -> None:
    """The file's top-level boxes tile it exactly, starting with ``ftyp``, with ``moov`` and ``mdat``."""
    total = path.stat().st_size
    seen: list[bytes] = []
    offset = 0
    with open(path, "rb") as handle:
        while offset < total:
            handle.seek(offset)
            header = handle.read(16)
            if len(header) < 8:
                raise MediaCheckFailed(f"MP4 ends inside a box header at byte {offset} of {total}")
            size, kind = struct.unpack(">I4s", header[:8])
            if size == 1:
                if len(header) < 16:
                    raise MediaCheckFailed(f"MP4 ends inside a box header at byte {offset} of {total}")
                size = struct.unpack(">Q", header[8:16])[0]
            elif size == 0:
                size = total - offset  # the last box runs to the end of the file
            if size < 8 or offset + size > total:
                raise MediaCheckFailed(
                    f"MP4 box {kind!r} at byte {offset} claims {size} bytes; the file ends at {total} "
                    "(cut off)"
                )
            seen.append(kind)
            offset += size
    if not seen or seen[0] != b"ftyp":
        raise MediaCheckFailed("MP4 does not start with an ftyp box")
    missing = [kind.decode() for kind in REQUIRED_BOXES if kind not in seen]
    if missing:
        raise MediaCheckFailed(f"MP4 has no {', '.join(missing)} box")


def check_image(path: Path) -> None:
    """The image decodes completely (a cut-off PNG or JPEG fails here)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as error:
        raise MediaCheckFailed(f"the image does not decode: {error}") from None


def check_media_file(path: Path, media_type: str | None, content_length: str | None = None) -> None:
    """Raise ``MediaCheckFailed`` unless the file at ``path`` is whole for its ``media_type``."""
    check_length(path.stat().st_size, content_length)
    if media_type in BOX_FILE_TYPES:
        check_box_structure(path)
    elif media_type is not None and media_type.startswith("image/"):
        check_image(path)
