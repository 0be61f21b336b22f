"""Every example manifest in configs/ validates, and together they cover every kind."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from relaybatch.manifests import Kind, load_items, open_manifest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
EXAMPLES = sorted((CONFIGS / "manifests").iterdir())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_manifest_validates(path: Path) -> None:
    validation = open_manifest(path).validate()
    assert validation.problems == []
    assert 2 <= validation.total <= 40


@pytest.mark.parametrize("kind", get_args(Kind))
def test_each_kind_has_its_own_example(kind: str) -> None:
    items = load_items(CONFIGS / "manifests" / f"{kind}.yaml")
    assert {item.kind for item in items} == {kind}
    assert 2 <= len(items) <= 5


def test_everything_yaml_has_every_kind() -> None:
    items = load_items(CONFIGS / "manifests" / "everything.yaml")
    assert {item.kind for item in items} == set(get_args(Kind))


def test_multimodal_examples_carry_inline_images() -> None:
    edits = [
        item
        for item in load_items(CONFIGS / "manifests" / "generate_content.yaml")
        if item.job == "edit-squares"
    ]
    parts = edits[0].request["contents"][0]["parts"]
    assert (
        parts[0]["text"].startswith("Turn the square") and parts[1]["inlineData"]["mimeType"] == "image/png"
    )
