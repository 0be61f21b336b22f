"""Time of the results export (checkpoint store -> results Parquet) per item, per kind mix.

The export is one phase of `relaybatch run` (issue 19's 20,000 items in 10 s end to end covers it),
so its cost per item is what matters: this script fills a fresh checkpoint store with done items
whose results come from the engine's own normalisers fed with gateway-shaped answers (no gateway,
no execution), then times ``export_results`` alone and prints wall and CPU microseconds per item
and the peak RSS growth during the export.

    .venv/bin/python benchmarks/export_throughput.py [--items 20000] [--mix chat|judgment|search|every]

Budget: at 2,000 items/s end to end a whole item may take 500 microseconds; the export's share is
set at a tenth of that (``BUDGET_MICROSECONDS``) and the ratio printed is budget / measured.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from machine_probe import probe

from relaybatch.engine import CheckpointStore, export_results
from relaybatch.engine.normalize import chat_result, judgment_result, web_search_result
from relaybatch.engine.store import Change
from relaybatch.manifests import Item

BUDGET_MICROSECONDS = 50.0
ADD_BATCH = 5000

QUESTIONS = {
    "complaint": {"type": "noul", "instructions": "Is this a complaint?"},
    "topic": {
        "type": "choice",
        "instructions": "Topic?",
        "criteria": {"billing": "money", "delivery": "post"},
    },
    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "angry"]},
}


def _chat(number: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    request = {"model": "relay-chat-small", "messages": [{"role": "user", "content": f"Question {number}?"}]}
    answer = {
        "model": "relay-chat-small",
        "choices": [{"message": {"content": f"Answer number {number}, short."}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 7,
            "total_tokens": 19,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
    return "chat", request, chat_result(answer)


def _judgment(number: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    request = {"model": "relay-judge-1", "state": f"Parcel {number} never came.", "questions": QUESTIONS}
    answer = {
        "model": "relay-judge-1",
        "answers": {
            "complaint": {"type": "noul", "noul": 0.91},
            "topic": {
                "type": "choice",
                "choice": "delivery",
                "probabilities": {"billing": 0.1, "delivery": 0.9},
                "confidence": 0.8,
            },
            "anger": {
                "type": "score",
                "score": 1.4,
                "legend": {"0": "calm", "1": "annoyed", "2": "angry"},
                "probabilities": {"0": 0.1, "1": 0.4, "2": 0.5},
                "confidence": 0.25,
            },
        },
        "usage": {"input_tokens": 40, "output_tokens": 3},
    }
    return "judgment", request, judgment_result(answer)


def _search(number: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    request = {"route": "search", "q": f"river {number}"}
    hits = [
        {
            "title": f"River {number} page {n}",
            "link": f"https://example.org/{number}/{n}",
            "snippet": "A river.",
        }
        for n in range(5)
    ]
    return "web_search", request, web_search_result({"code": 200, "took_ms": 30, "data": {"organic": hits}})


MIXES: dict[str, list[Callable[[int], tuple[str, dict[str, Any], dict[str, Any]]]]] = {
    "chat": [_chat],
    "judgment": [_judgment],
    "search": [_search],
    "every": [_chat, _judgment, _search],
}


def _items(count: int, mix: str) -> Iterator[tuple[Item, dict[str, Any]]]:
    makers = MIXES[mix]
    for number in range(count):
        kind, request, result = makers[number % len(makers)](number)
        item = Item.build(item_id=str(number), job="export", kind=kind, request=request, carry={"n": number})  # type: ignore[arg-type]
        yield item, result


def fill(store: CheckpointStore, count: int, mix: str) -> None:
    batch: list[tuple[Item, dict[str, Any]]] = []
    for pair in _items(count, mix):
        batch.append(pair)
        if len(batch) == ADD_BATCH:
            _add(store, batch)
            batch = []
    if batch:
        _add(store, batch)


def _add(store: CheckpointStore, batch: list[tuple[Item, dict[str, Any]]]) -> None:
    store.add_items(item for item, _ in batch)
    store.apply([Change(item.key, "sending") for item, _ in batch])
    finished = "2026-11-23T22:45:46.123+00:00"
    store.apply(
        [
            Change(item.key, "done", {"result": result, "finished_at": finished, "latency_ms": 12.5})
            for item, result in batch
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--mix", choices=sorted(MIXES), default="chat")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="export-throughput-"))
    try:
        store = CheckpointStore(folder / "checkpoint.sqlite")
        fill(store, options.items, options.mix)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        [path] = export_results(store, folder / "results")
        wall = time.perf_counter() - wall_start
        cpu = time.process_time() - cpu_start
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        size = path.stat().st_size
        store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    per_item = wall / options.items * 1e6
    print(f"mix: {options.mix}, items: {options.items}, file {size / options.items:,.0f} bytes per item")
    print(
        f"export wall {wall:.3f} s = {per_item:,.1f} microseconds per item "
        f"({options.items / wall:,.0f} items/s)"
    )
    cpu_per_item = cpu / options.items * 1e6
    print(f"export CPU {cpu_per_item:,.1f} microseconds per item")
    print(f"peak RSS growth during export: {(rss_after - rss_before) / 1024:,.1f} MB")
    print(probe())
    print(
        f"ratio to budget ({BUDGET_MICROSECONDS:g} microseconds per item): wall "
        f"{BUDGET_MICROSECONDS / per_item:.2f}, CPU {BUDGET_MICROSECONDS / cpu_per_item:.2f} "
        "(on a busy machine wall time includes waiting for a core; CPU is the steadier figure)"
    )


if __name__ == "__main__":
    main()
