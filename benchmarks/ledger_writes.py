"""The cost ledger's writes as a busy run makes them, and the bytes they leave.

Calls go through the spend guard in groups, as the engine drives it: ``reserve`` for a group, one
``commit`` (the reservations, durable before the sends), ``settle`` for the group, one ``commit``
(the charges). Prints CPU microseconds per call of the commits alone and of the whole cycle, and
the cost store's bytes per call (file, and per table and index from ``dbstat``).

    .venv/bin/python benchmarks/ledger_writes.py [--calls 20000] [--group 20]

Run it against another checkout's code to compare layouts back to back (CPU time, so a loaded
machine inflates both sides alike): ``PYTHONPATH=<other checkout> .venv/bin/python benchmarks/...``.
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import relaybatch
from relaybatch.cost_model.budget import Budget
from relaybatch.cost_model.pricing import PriceBook, parse_pricing
from relaybatch.costs.guard import RunSpendGuard
from relaybatch.costs.ledger import CostStore

MODEL = "relay-chat-small"
PRICING = {"data": {"id": MODEL, "pricing": {"text": {"prompt": "1.5E-7", "completion": "6E-7"}}}}
REQUEST = {"model": "relay-chat-small", "messages": [{"role": "user", "content": "row 1"}], "max_tokens": 128}
RESULT = {
    "usage": {
        "prompt_tokens": 10,
        "completion_tokens": 34,
        "total_tokens": 44,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
}


@dataclass(frozen=True)
class Call:
    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]
    attempt: int = 1
    latency_ms: float | None = 2.2


def _no_fetch(model: str, provider: str | None) -> Any:
    raise AssertionError("prices are preloaded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--group", type=int, default=20, help="Calls per commit, as the engine groups them")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ledger-writes-"))
    path = folder / "costs.sqlite"
    book = PriceBook(_no_fetch)
    book.put(parse_pricing(PRICING), "alpha")
    budget = Budget(Decimal(1_000_000))
    guard = RunSpendGuard("chat-20000", CostStore(path), book, budget, {"chat-20000": "alpha"})
    calls = [
        Call(hashlib.sha256(str(n).encode()).hexdigest()[:32], f"r{n}", "chat-20000", "chat", REQUEST)
        for n in range(args.calls)
    ]
    commit_cpu = 0.0
    cycle_started = time.process_time()
    for start in range(0, len(calls), args.group):
        group = calls[start : start + args.group]
        for call in group:
            assert guard.reserve(call)
        began = time.process_time()
        guard.commit()
        commit_cpu += time.process_time() - began
        for call in group:
            guard.settle(call, RESULT)
        began = time.process_time()
        guard.commit()
        commit_cpu += time.process_time() - began
    cycle_cpu = time.process_time() - cycle_started
    guard.store.close()

    print(f"code: {Path(relaybatch.__file__).parent.parent}")
    print(
        f"{args.calls:,} calls in groups of {args.group}: commits {commit_cpu / args.calls * 1e6:.1f} us "
        f"of CPU per call, reserve+settle+commits {cycle_cpu / args.calls * 1e6:.1f} us per call"
    )
    size = sum(file.stat().st_size for file in folder.glob("costs.sqlite*"))
    print(f"costs.sqlite: {size / args.calls:,.0f} bytes per call")
    connection = sqlite3.connect(path)
    for name, payload, unused, total in connection.execute(
        "select name, sum(payload), sum(unused), sum(pgsize) from dbstat group by name order by 4 desc"
    ):
        if total / args.calls >= 1:
            print(
                f"  {name}: payload {payload / args.calls:,.0f}, unused {unused / args.calls:,.0f}, "
                f"total {total / args.calls:,.0f}"
            )
    connection.close()


if __name__ == "__main__":
    main()
