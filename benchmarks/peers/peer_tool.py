"""What the peer tools (bare, curator, LiteLLM) share: their common arguments and the work file.

Standard library only: the tools import it from their own folder, whichever virtualenv runs them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def tool_parser(
    description: str, *, max_retries: int = 5, max_retries_help: str | None = None
) -> argparse.ArgumentParser:
    """The arguments every peer tool takes; a tool adds its own before parsing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--work", required=True)
    parser.add_argument("--base-url", required=True, help="The emulator's /v1 base URL")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-retries", type=int, default=max_retries, help=max_retries_help)
    return parser


def load_work(path: str) -> list[dict[str, Any]]:
    """The work file: one JSON request object a line."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
