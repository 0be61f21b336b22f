"""Long video batches that always finish (issue 28), against the emulator's fault modes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_fakes import FAST, FAST_MEDIA
from engine_items import video
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.emulator import create_app, load_config
from relaybatch.engine import CheckpointStore, EngineSettings, RunSummary, execute
from relaybatch.gateway import GatewayClient, RetryPolicy
from relaybatch.settings import EMULATOR_DEMO_KEY

AppWith = Callable[..., Starlette]


def app_with(**video_settings: Any) -> Starlette:
    config = load_config()
    config.media = {"video": {**FAST_MEDIA["video"], **video_settings}}
    return create_app(config)


@pytest.fixture
async def run_on() -> AsyncIterator[Callable[..., Any]]:
    """run_on(app, store, settings=FAST) -> RunSummary: one execution as the demo account."""

    async def run(app: Starlette, store: CheckpointStore, settings: EngineSettings = FAST) -> RunSummary:
        async with GatewayClient(
            "http://emulator.local",
            SecretStr(EMULATOR_DEMO_KEY),
            transport=httpx.ASGITransport(app=app),
            retry=RetryPolicy(max_attempts=1),
        ) as client:
            return await execute(store, client, settings=settings)

    yield run


async def test_an_unknown_running_status_is_not_terminal_and_kept_verbatim(
    tmp_path: Path, run_on: Callable[..., Any]
) -> None:
    app = app_with(running_status="rendering", render_seconds_base=0.4)
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    store.add_items([video(n) for n in range(3)])
    seen: list[str] = []
    original = store.apply

    def watch(changes: list[Any]) -> Any:
        for change in changes:
            remote = ((change.fields or {}).get("result") or {}).get("remote") or {}
            if remote.get("status"):
                seen.append(remote["status"])
        return original(changes)

    store.apply = watch  # type: ignore[method-assign]
    summary = await run_on(app, store)
    store.close()
    assert summary.counts == {"done": 3}
    assert "rendering" in seen
