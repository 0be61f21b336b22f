"""Is a Prefect server configured? Answered without importing Prefect (seconds on a loaded machine).

A server is configured when ``PREFECT_API_URL`` is set in the environment or in the active Prefect
profile (what ``prefect config set PREFECT_API_URL=...`` writes). Everything else in Prefect's
settings that could name a server (a ``prefect.toml`` or ``.env`` in the working folder) is read
only by Prefect itself: relaybatch asks for the environment or the profile, as docs/prefect.md says.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path


def _profiles_path() -> Path:
    if os.environ.get("PREFECT_PROFILES_PATH"):
        return Path(os.environ["PREFECT_PROFILES_PATH"]).expanduser()
    home = Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()
    return home / "profiles.toml"


def configured_api_url() -> str | None:
    """The Prefect API URL this process would report to, or None (no server configured)."""
    return configured_setting("PREFECT_API_URL")


def configured_setting(name: str) -> str | None:
    """A Prefect setting (``PREFECT_API_URL``, ``PREFECT_API_KEY``, ``PREFECT_API_AUTH_STRING``) from
    the environment or the active profile; None when unset or blank."""
    if name in os.environ:
        return os.environ[name].strip() or None
    try:
        profiles = tomllib.loads(_profiles_path().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    profile = (profiles.get("profiles") or {}).get(active) or {}
    value = profile.get(name)
    return str(value).strip() or None if value else None
