"""Media files of one item, under the run folder, named from the item key (never from user input)."""

from __future__ import annotations

import os
from pathlib import Path


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
        path = self.path_for(index, extension)
        temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        temporary.write_bytes(content)
        os.replace(temporary, path)
        return self.relative(path)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.run_dir).as_posix()
