"""What the manifest tests share: the problems a manifest is refused with."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaybatch.manifests import ManifestInvalid, load_items


def problems(path: Path) -> list[str]:
    """Each located problem of a manifest that must not load, as the user reads it."""
    with pytest.raises(ManifestInvalid) as caught:
        load_items(path)
    return [str(problem) for problem in caught.value.problems]
