"""One definition of latency in both Parquet files: send-to-answer of the request that was
answered, the limiter's wait apart; the ledger row and the results row show the same figure."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
from pydantic import SecretStr

from relaybatch.costs import spend_guard_for_run
from relaybatch.emulator import create_app, load_config
from relaybatch.engine import CheckpointStore, EngineSettings, execute, export_results
from relaybatch.gateway import GatewayClient
from relaybatch.manifests import Item
from relaybatch.settings import EMULATOR_DEMO_KEY

WAIT_SECONDS = 1.0


class SlowLimiter:
    """Makes every request wait a while before it may be sent."""

    async def acquire(self, purpose: Any = "submit") -> None:
        await asyncio.sleep(WAIT_SECONDS)

    def observe(self, status: int, headers: Mapping[str, str], rate_limit: Any = None) -> None:
        return None

    def no_answer(self) -> None:
        return None


async def test_latency_excludes_the_limiter_wait_and_both_files_agree(tmp_path: Path) -> None:
    app = create_app(load_config())
    request = {"model": "relay-chat-small", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    items = [Item.build(item_id=str(n), job="j", kind="chat", request={**request, "n": n}) for n in range(3)]
    store = CheckpointStore(tmp_path / "run" / "checkpoint.sqlite")
    try:
        store.add_items(items)
        async with (
            GatewayClient(
                "http://emulator.local",
                SecretStr(EMULATOR_DEMO_KEY),
                transport=httpx.ASGITransport(app=app),
                limiter=SlowLimiter(),
            ) as client,
            spend_guard_for_run(store, client) as guard,
        ):
            await execute(store, client, settings=EngineSettings(concurrency=3), spend=guard)
        (path,) = export_results(store, tmp_path / "results")
    finally:
        store.close()
    results = {row["item_key"]: row for row in pq.read_table(path).to_pylist()}
    ledger = {row["item_key"]: row for row in pq.read_table(tmp_path / "run" / "ledger.parquet").to_pylist()}
    assert set(results) == set(ledger) and len(results) == 3
    for key, row in results.items():
        assert row["limiter_wait_ms"] >= WAIT_SECONDS * 1000
        # The wait is not in the latency: an in-process chat answer takes milliseconds, not a second.
        assert row["latency_ms"] < row["limiter_wait_ms"]
        assert abs(ledger[key]["latency_seconds"] * 1000 - row["latency_ms"]) < 1e-6
