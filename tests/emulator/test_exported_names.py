"""Each emulator package's public names, locked: a change here is a change of the package's API."""

from __future__ import annotations

import importlib

import pytest

EXPORTS = {
    "relaybatch.emulator": ["EmulatorConfig", "EmulatorState", "create_app", "load_config"],
    "relaybatch.emulator.codecs": ["fast_json", "images", "mp4", "sse"],
    "relaybatch.emulator.judgment": ["routes"],
    "relaybatch.emulator.media": ["routes"],
    "relaybatch.emulator.search": ["routes"],
    "relaybatch.emulator.text": ["routes"],
}


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_exported_names(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == EXPORTS[package]
    assert all(hasattr(module, name) for name in module.__all__)


def test_every_package_is_listed() -> None:
    """A new emulator subpackage needs its own entry here (and in pyproject's packages list)."""
    from pathlib import Path

    root = Path(importlib.import_module("relaybatch.emulator").__file__ or "").parent
    found = {"relaybatch.emulator"} | {
        f"relaybatch.emulator.{init.parent.name}" for init in root.glob("*/__init__.py")
    }
    assert found == set(EXPORTS)
