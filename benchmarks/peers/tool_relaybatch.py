"""The relaybatch side of the peer benchmark: one work file through the engine, as a run does it.

Runs in the project's own environment. The timed span is what a user waits for after pressing
enter: read the manifest, checkpoint its items in SQLite, send them all through the engine with
its adaptive token bucket, and write the results Parquet. It prints one JSON line:
``{"completed": N, "failed": N, "seconds": S, "rate_limited": N}``.

    python benchmarks/peers/tool_relaybatch.py --work work.jsonl --base-url URL --out DIR [--rpm 600]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from relaybatch.connect import open_client
from relaybatch.engine import AdaptiveTokenBucket, CheckpointStore, EngineSettings, execute, export_results
from relaybatch.engine.states import DONE
from relaybatch.manifests import load_items
from relaybatch.settings import Settings


async def run(work: Path, base_url: str, out: Path, rpm: float | None, concurrency: int) -> dict[str, Any]:
    started = time.perf_counter()
    store = CheckpointStore(out / "checkpoint.sqlite")
    try:
        store.add_items(load_items(work))
        # The limit a user would configure for the account; None learns it from the gateway.
        limiter = AdaptiveTokenBucket(rpm)
        settings = EngineSettings(concurrency=concurrency)
        # The key comes from RELAYBATCH_API_KEY, as in any run.
        async with open_client(Settings(base_url=base_url), limiter) as client:
            summary = await execute(store, client, settings=settings, limiter=limiter)
        await limiter.aclose()
        export_results(store, out / "results")
        seconds = time.perf_counter() - started
    finally:
        store.close()
    completed = summary.counts.get(DONE, 0)
    return {
        "completed": completed,
        "failed": sum(summary.counts.values()) - completed,
        "seconds": seconds,
        "rate_limited": limiter.stats().rate_limited,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work", type=Path, required=True, help="JSONL table manifest (id, model, prompt, max_tokens)"
    )
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True, help="Empty folder for the run's files")
    parser.add_argument(
        "--rpm", type=float, default=None, help="Configured account limit (requests per minute)"
    )
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    result = asyncio.run(run(args.work, args.base_url, args.out, args.rpm, args.concurrency))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
