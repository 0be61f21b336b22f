"""Media files of one item, under the run folder, named from the item key (never from user input).

Files come three ways: base64 payloads in an answer (images, generate-content parts, V1 task
data), the V2 video content route, and links in a finished V1 task's ``data`` (``video_url``,
``audio_url``, ``urls`` ...). Links are downloaded the moment the task is seen complete, because
a real gateway's links expire within hours; the result keeps both the local path and the link.
A done item whose files are missing (``files_missing``) is polled once more on resume, which
downloads them again (poller.py, "Missing media").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from relaybatch.files import write_bytes_atomically
from relaybatch.gateway.media import decode_base64_media
from relaybatch.run_folder import RunPaths

if TYPE_CHECKING:
    from relaybatch.gateway import GatewayClient

# File extensions per media type; anything else is saved as .bin.
EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/webp": "webp",
    "image/gif": "gif",
    "video/mp4": "mp4",
    "video/webm": "webm",
    "video/quicktime": "mov",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/ogg": "ogg",
    "audio/flac": "flac",
    "audio/aac": "aac",
    "audio/mp4": "m4a",
}
# What a V1 task of each type most likely holds, when neither the data nor the link says.
_TASK_TYPE_EXTENSIONS = {
    "video_generation": "mp4",
    "audio_generation": "mp3",
    "image_generation": "png",
    "image_edit": "png",
}


def extension_for(media_type: str | None, default: str = "bin") -> str:
    return EXTENSIONS.get(str(media_type).split(";")[0].strip().lower(), default)


class MediaFiles:
    """Where one item's media go: ``media/<key>-<index>.<extension>`` inside the run folder."""

    def __init__(self, run_dir: Path, key: str) -> None:
        self.run_dir = run_dir
        self.key = key

    def path_for(self, index: int, extension: str) -> Path:
        folder = self.run_dir / "media"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{self.key}-{index}.{extension}"

    def write(self, index: int, extension: str, content: bytes) -> str:
        """Write atomically (temporary name, then rename) and return the path relative to the run."""
        return self.relative(write_bytes_atomically(self.path_for(index, extension), content))

    def write_base64(self, index: int, text: object, declared_type: str | None = None) -> str | None:
        """Decode a base64 payload and write it, named by the type its bytes show (else the declared
        one); None when it is not base64 text (nothing is written)."""
        if not isinstance(text, str):
            return None
        try:
            media = decode_base64_media(text, declared_type)
        except ValueError:
            return None
        return self.write(index, extension_for(media.media_type), media.data)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.run_dir).as_posix()

    async def download(self, client: GatewayClient, index: int, url: str, expected_extension: str) -> str:
        """Fetch ``url`` into ``media/<key>-<index>.<ext>`` and return the path relative to the run.

        The extension is the one the file's own bytes show when they show one (a link's suffix or
        declared type can be wrong), else ``expected_extension``."""
        path = self.path_for(index, expected_extension)
        saved = await client.download_file(url, path)
        sniffed = extension_for(saved.media_type, expected_extension)
        if sniffed != expected_extension:
            renamed = self.path_for(index, sniffed)
            os.replace(path, renamed)
            path = renamed
        return self.relative(path)


def files_missing(run_dir: Path, result: dict[str, Any] | None) -> bool:
    """Whether a done item of a polled kind lacks its media files: its result lists none (a V1
    task finished by a relaybatch older than its link downloads), or a listed file is neither in
    the run folder nor in one of its shards' (merged shards keep their files where they were)."""
    paths = (result or {}).get("media_paths")
    if not isinstance(paths, list):
        return True
    homes = [folder.root for folder in RunPaths(run_dir).store_folders()]
    return not all(any((home / str(path)).is_file() for home in homes) for path in paths)


def link_extension(url: str, declared_type: Any, task_type: Any) -> str:
    """The extension a linked file is expected to have: from its declared media type, else the
    link's own suffix, else the task type."""
    if isinstance(declared_type, str) and declared_type.lower() in EXTENSIONS:
        return extension_for(declared_type)
    suffix = Path(urlsplit(url).path).suffix.lower().lstrip(".")
    if suffix in set(EXTENSIONS.values()) or suffix == "jpg":
        return "jpeg" if suffix == "jpg" else suffix
    return _TASK_TYPE_EXTENSIONS.get(str(task_type), "bin")
