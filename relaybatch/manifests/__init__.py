"""Job manifests in, validated items with stable keys out."""

from __future__ import annotations

from pathlib import Path

from relaybatch.errors import UserError
from relaybatch.manifests.csv_manifest import load_csv_manifest
from relaybatch.manifests.items import Item, Kind, canonical_json, item_key
from relaybatch.manifests.problems import ManifestInvalid, Problem

__all__ = [
    "Item",
    "Kind",
    "ManifestInvalid",
    "Problem",
    "canonical_json",
    "item_key",
    "load_items",
    "run_name_for",
]


def run_name_for(path: Path) -> str:
    """The run a manifest belongs to: its file name without the extension."""
    return path.stem


def load_items(path: Path) -> list[Item]:
    """Load and validate a manifest; raise ManifestInvalid listing every problem."""
    if not path.exists():
        raise UserError(f"{path}: no such file; give the path of a manifest")
    if path.suffix.lower() == ".csv":
        return load_csv_manifest(path)
    raise UserError(f"{path}: unsupported manifest type '{path.suffix}'; use .csv")
