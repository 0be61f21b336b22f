"""CPU of the checkpoint store's writes per item, by group size: adding items, and the two state
changes every chat item makes (``sending`` with its attempt, then ``done`` with its result), each
with its event row.

The engine's group commit (engine/writer.py) puts the changes of the same 2 ms in one ``apply``; on
a busy run that is a few to a few dozen changes per group, on a quiet one a single change. The
figure to compare is CPU microseconds per item against the 1,000 us per item that the end-to-end
target (1,000 chat items per second on one core) leaves for everything, client included.

    .venv/bin/python benchmarks/checkpoint_writes.py [--items 20000] [--groups 1,4,16,64]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_items import chat_items
from machine_probe import probe

from relaybatch.engine import Change, CheckpointStore

PER_ITEM_BUDGET_US = 1000.0
RESULT = {
    "output_text": "An answer of a few dozen words. " * 4,
    "finish_reason": "stop",
    "model": "relay-chat-small",
    "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
    "tokens": {"input_tokens": 12, "output_tokens": 30, "cached_tokens": None, "reasoning_tokens": None},
}


def measure(count: int, group: int, folder: Path) -> tuple[float, float]:
    """(add_items, sending + done) CPU microseconds per item, in a fresh store."""
    work = list(chat_items(count, "writes", question="Q {}?"))
    store = CheckpointStore(folder / f"group-{group}" / "checkpoint.sqlite")
    try:
        started = time.process_time()
        store.add_items(work)
        adding = (time.process_time() - started) / count * 1e6
        keys = [item.key for item in work]
        started = time.process_time()
        for first in range(0, count, group):
            batch = keys[first : first + group]
            store.apply([Change(key, "sending", {"attempts": 1}) for key in batch])
            done = {"result": RESULT, "latency_ms": 3.2, "finished_at": "2026-11-22T00:00:00.000+00:00"}
            store.apply([Change(key, "done", done) for key in batch])
        changing = (time.process_time() - started) / count * 1e6
        assert store.count_by_state() == {"done": count}
    finally:
        store.close()
    return adding, changing


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--groups", default="1,4,16,64")
    options = parser.parse_args()
    print(f"items: {options.items}; CPU microseconds per item, against a {PER_ITEM_BUDGET_US:,.0f} us budget")
    print("| changes per group | add_items | sending + done | share of budget |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="checkpoint-writes-") as folder:
        for group in (int(size) for size in options.groups.split(",")):
            adding, changing = measure(options.items, group, Path(folder))
            share = (adding + changing) / PER_ITEM_BUDGET_US
            print(f"| {group} | {adding:,.0f} us | {changing:,.0f} us | {share:.2f} |")
    print(probe())


if __name__ == "__main__":
    main()
