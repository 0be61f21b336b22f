"""The README's three SDK snippets run as written against a real `relaybatch emulator serve`.

The emulator is started on a free port (the snippets' `127.0.0.1:8780` is swapped for it); each
snippet runs in its own Python process, as a user would paste it, and must exit 0 with its answers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from tests.emulator.codecs.mp4_checks import check_mp4
from tests.emulator.served import Served, served_emulator

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTED_ADDRESS = "http://127.0.0.1:8780"


def emulator_section() -> str:
    text = README.read_text()
    start = text.index("## The emulator\n")
    return text[start : text.index("\n## ", start + 1)]


def python_snippets() -> dict[str, str]:
    """The section's python blocks, named by the SDK each imports."""
    blocks = re.findall(r"```python\n(.*?)```", emulator_section(), flags=re.S)
    imports = {
        "openai": "from openai import",
        "anthropic": "import anthropic",
        "genai": "from google import genai",
    }
    return {sdk: block for block in blocks for sdk, line in imports.items() if line in block}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with served_emulator() as running:
        yield running


def run_snippet(sdk: str, served: Served, folder: Path) -> list[str]:
    code = python_snippets()[sdk].replace(DOCUMENTED_ADDRESS, served.url)
    assert served.url in code, f"the {sdk} snippet does not use {DOCUMENTED_ADDRESS}"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def charges(served: Served, route: str) -> list[dict[str, str]]:
    ledger = httpx.get(f"{served.url}/_emulator/ledger", timeout=10).json()["charges"]
    return [charge for charge in ledger if charge["route"] == route]


def test_the_readme_shows_serve_and_all_three_sdks() -> None:
    section = emulator_section()
    assert "relaybatch emulator serve --port 8780" in section
    assert sorted(python_snippets()) == ["anthropic", "genai", "openai"]


def test_openai_snippet_chat_responses_and_videos(served: Served, tmp_path: Path) -> None:
    chat, responses, video_state = run_snippet("openai", served, tmp_path)
    assert chat.startswith("Emulated answer from relay-chat-small")
    assert responses.startswith("Emulated answer from relay-chat-small")
    assert video_state == "completed 100"
    assert check_mp4((tmp_path / "lighthouse.mp4").read_bytes())["duration_ms"] == 4000
    assert len(charges(served, "/v1/chat/completions")) == 1
    assert len(charges(served, "/v1/responses")) == 1
    [video] = charges(served, "/v2/videos")
    assert (video["model"], Decimal(video["usd"])) == ("relay-video-2", Decimal("0.40"))


def test_anthropic_snippet_messages(served: Served, tmp_path: Path) -> None:
    [text] = run_snippet("anthropic", served, tmp_path)
    assert text.startswith("Emulated answer from relay-claude-haiku")
    assert [c["model"] for c in charges(served, "/v1/messages")] == ["relay-claude-haiku"]


def test_genai_snippet_generate_content(served: Served, tmp_path: Path) -> None:
    [text] = run_snippet("genai", served, tmp_path)
    assert text.startswith("Emulated answer from relay-gemini-flash")
    route = "/v1beta/models/relay-gemini-flash:generateContent"
    assert [c["model"] for c in charges(served, route)] == ["relay-gemini-flash"]
