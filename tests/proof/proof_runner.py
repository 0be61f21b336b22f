"""The runner the crash and fault suites start, kill and restart: one run of a manifest through the engine.

It does what a run does (load the manifest, checkpoint new items, execute with the spend guard
and the adaptive limiter, export results and the ledger) without Prefect around it, so a SIGKILL
hits the engine itself and a restart costs a process start, not a Prefect server start.

``PROOF_CRASH_AT=point:n`` makes the runner SIGKILL itself at the n-th time the engine reaches
that hook point (sending_committed, answered, result_committed, poll_sending, poll_answered,
poll_committed): precise kills between two steps that a timer would rarely hit. It prints
``executing`` when the engine starts and one JSON line with the counts (and the seconds since
``executing``) when it ends.

    python tests/proof/proof_runner.py MANIFEST RUN_DIR   (RELAYBATCH_BASE_URL / _API_KEY set)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from relaybatch.connect import open_client
from relaybatch.costs import budgets_from_manifest, spend_guard_for_run
from relaybatch.engine import (
    AdaptiveTokenBucket,
    CheckpointStore,
    EngineSettings,
    PollSettings,
    execute,
    export_results,
)
from relaybatch.gateway import RetryPolicy
from relaybatch.manifests import load_items, open_manifest
from relaybatch.settings import Settings

POLL = PollSettings(initial_seconds=0.2, max_seconds=1.0, backoff=1.5, jitter=0.2)


def crash_hook() -> object:
    target = os.environ.get("PROOF_CRASH_AT")
    if not target:
        return None
    point, _, nth = target.partition(":")
    wanted, seen = int(nth or 1), Counter[str]()

    def hook(reached: str, key: str) -> None:
        if reached != point:
            return
        seen[reached] += 1
        if seen[reached] >= wanted:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


async def run(manifest: Path, run_dir: Path) -> dict[str, object]:
    opened = open_manifest(manifest)
    store = CheckpointStore(run_dir / "checkpoint.sqlite")
    try:
        store.add_items(load_items(manifest))
        concurrency = int(os.environ.get("PROOF_CONCURRENCY", "4"))
        max_attempts = int(os.environ.get("PROOF_MAX_ATTEMPTS", "5"))
        settings = EngineSettings(
            concurrency=concurrency,
            retry=RetryPolicy(max_attempts=max_attempts, base_delay=0.05, max_delay=0.5),
            poll=POLL,
        )
        limiter = AdaptiveTokenBucket(None)
        print("executing", flush=True)
        started = time.monotonic()
        async with (
            open_client(Settings(), limiter) as client,
            spend_guard_for_run(store, client, budgets=budgets_from_manifest(opened)) as guard,
        ):
            summary = await execute(
                store,
                client,
                settings=settings,
                limiter=limiter,
                spend=guard,
                hook=crash_hook(),  # type: ignore[arg-type]
            )
        await limiter.aclose()
        export_results(store, run_dir / "results")
        return {
            "counts": summary.counts,
            "sent": summary.sent,
            "stopped": summary.stopped,
            "engine_seconds": time.monotonic() - started,
        }
    finally:
        store.close()


def main() -> None:
    manifest, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    print(json.dumps(asyncio.run(run(manifest, run_dir))), flush=True)


if __name__ == "__main__":
    main()
