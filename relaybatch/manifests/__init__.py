"""Job manifests in, validated items with stable keys out.

Small manifests: `load_items(path)`. Any size: `open_manifest(path)`, then `.validate()` and
`.iter_items()`, which stream rows so memory does not grow with the file.
"""

from __future__ import annotations

from pathlib import Path

from relaybatch.manifests.items import Item, Kind, canonical_json, item_key
from relaybatch.manifests.manifest import Manifest, Validation, check_routes, open_manifest, seen_rows
from relaybatch.manifests.problems import ManifestInvalid, Problem
from relaybatch.manifests.schema import RunSettings

__all__ = [
    "Item",
    "Kind",
    "Manifest",
    "ManifestInvalid",
    "Problem",
    "RunSettings",
    "Validation",
    "canonical_json",
    "check_routes",
    "item_key",
    "load_items",
    "open_manifest",
    "run_name_for",
    "seen_rows",
]


def run_name_for(path: Path) -> str:
    """The run a manifest belongs to: its `run.name`, else its file name without the extension."""
    return open_manifest(path).run_name


def load_items(path: Path) -> list[Item]:
    """Load and validate a small manifest; raise ManifestInvalid listing every problem."""
    manifest = open_manifest(path)
    manifest.validate().raise_if_invalid()
    return list(manifest.iter_items())
