"""The engine at a million items: peak memory of a full run, and how fast a 99 %-done run resumes.

Targets (issue 6): peak memory for a 1,000,000-item run under 500 MB; resuming a 1,000,000-item run
that is 99 % done sends its first new request within 5 s.

The gateway here is an in-process double (``StubGateway``: a fixed chat completion, no HTTP), so
the figures are the engine's own (store, scheduler, writer, Parquet export) and not the emulator's,
whose request log grows with every distinct body it sees.

    .venv/bin/python benchmarks/engine_scale.py memory [--items 1000000]
    .venv/bin/python benchmarks/engine_scale.py resume [--items 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_items import chat_items

from relaybatch.engine import CheckpointStore, EngineSettings, execute, export_results
from relaybatch.gateway import RetryPolicy

MEMORY_TARGET_MB = 500
RESUME_TARGET_SECONDS = 5.0


class StubGateway:
    """Answers every chat call at once with the same small completion; notes the first call."""

    retry_policy = RetryPolicy()  # the engine reads the client's policy; the stub never fails

    def __init__(self) -> None:
        self.calls = 0
        self.first_call_at: float | None = None

    def with_retry(self, policy: RetryPolicy) -> StubGateway:
        return self  # one attempt or five: the stub answers the first

    async def chat_completions(self, request: dict[str, Any], **options: Any) -> dict[str, Any]:
        if self.first_call_at is None:
            self.first_call_at = time.perf_counter()
        self.calls += 1
        await asyncio.sleep(0)
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": request["model"],
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
        }


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


async def memory(items: int, folder: Path) -> None:
    started = time.perf_counter()
    store = CheckpointStore(folder / "checkpoint.sqlite")
    store.add_items(chat_items(items, "scale"))
    planned = time.perf_counter()
    gateway = StubGateway()
    summary = await execute(store, gateway, settings=EngineSettings(concurrency=64))  # type: ignore[arg-type]
    executed = time.perf_counter()
    export_results(store, folder / "results")
    store.close()
    finished = time.perf_counter()
    assert summary.counts == {"done": items}, summary.counts
    peak = peak_mb()
    print(
        f"{items:,} items: plan {planned - started:.1f} s, execute {executed - planned:.1f} s "
        f"({items / (executed - planned):,.0f} items/s), export {finished - executed:.1f} s"
    )
    print(
        f"peak memory (max RSS) {peak:,.0f} MB (target < {MEMORY_TARGET_MB} MB); "
        f"ratio to target {MEMORY_TARGET_MB / peak:.2f} (above 1 is within)"
    )


def fill_store(checkpoint: Path, items: int, done: int) -> None:
    """A million-item checkpoint written straight to SQLite (building a million Item models first
    would only measure pydantic): rows 1..done are done with a result, the rest pending."""
    store = CheckpointStore(checkpoint)
    result = '{"finish_reason":"stop","output_text":"ok","tokens":{"input_tokens":12,"output_tokens":1}}'
    rows = (
        (
            hashlib.sha256(str(number).encode()).hexdigest()[:32],
            str(number),
            "scale",
            "chat",
            json.dumps(
                {"model": "relay-chat-small", "messages": [{"role": "user", "content": f"Q {number}?"}]}
            ),
            json.dumps({"n": number}),
            "done" if number < done else "pending",
            1 if number < done else 0,
            result if number < done else None,
        )
        for number in range(items)
    )
    with store.db.conn:
        store.db.conn.executemany(
            "insert into items (key, item_id, job, kind, request, carry, state, attempts, result) "
            "values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    store.close()


async def resume(items: int, folder: Path) -> None:
    checkpoint = folder / "checkpoint.sqlite"
    left = items // 100
    fill_store(checkpoint, items, items - left)

    started = time.perf_counter()
    store = CheckpointStore(checkpoint)
    gateway = StubGateway()
    summary = await execute(store, gateway, settings=EngineSettings(concurrency=64))  # type: ignore[arg-type]
    finished = time.perf_counter()
    store.close()
    assert summary.counts == {"done": items}, summary.counts
    assert gateway.first_call_at is not None and gateway.calls == left
    first = gateway.first_call_at - started
    print(f"{items:,} items, {left:,} left: open store + execute -> first new request {first:.3f} s")
    ratio = RESUME_TARGET_SECONDS / first
    print(f"target < {RESUME_TARGET_SECONDS:.0f} s; ratio to target {ratio:.1f} (above 1 is within)")
    print(f"the {left:,} items left finished in {finished - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["memory", "resume"])
    parser.add_argument("--items", type=int, default=1_000_000)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="engine-scale-"))
    try:
        asyncio.run(
            memory(options.items, folder) if options.what == "memory" else resume(options.items, folder)
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
