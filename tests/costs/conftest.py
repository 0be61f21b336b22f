"""Fixtures for the cost tests: a headless Chromium (installed from Debian when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
APT_TIMEOUT_SECONDS = 900


def _install_chromium() -> None:
    """CI machines start empty: install Debian's chromium package, as root, waiting for apt's lock."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock_wait = ["-o", "DPkg::Lock::Timeout=300"]
    for command in (
        ["apt-get", *lock_wait, "update", "-qq"],
        ["apt-get", *lock_wait, "install", "-y", "-qq", "--no-install-recommends", "chromium"],
    ):
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_SECONDS, check=False
        )
        if result.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed ({result.returncode}): {result.stderr[-2000:]}")


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            pytest.skip("Debian's chromium is not installed and installing it needs root (apt-get)")
        if shutil.which("apt-get") is None:
            pytest.fail("chromium is missing and apt-get is not available to install it")
        _install_chromium()
    assert CHROMIUM.exists(), "apt-get reported success but /usr/bin/chromium is missing"
    return CHROMIUM
