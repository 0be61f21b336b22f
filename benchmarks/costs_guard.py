"""Spend guard overhead per billed call, and ledger export speed.

Target: the guard must never be what limits a run. The gateway client sustains about 2,000
requests per second (shared/research/http-client.md), so reserve + settle (price the usage,
commit the ledger row, update the budget) must sustain 2,000 calls per second on one core, and
exporting the ledger to Parquet must run at 100,000 rows per second.

    .venv/bin/python benchmarks/costs_guard.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from relaybatch.costs.budget import Budget
from relaybatch.costs.guard import RunSpendGuard
from relaybatch.costs.ledger import CostStore, write_ledger
from relaybatch.costs.pricing import PriceBook, parse_pricing

TARGET_CALLS_PER_SECOND = 2_000
TARGET_EXPORT_ROWS_PER_SECOND = 100_000
PRICING = {
    "data": {
        "id": "bench-model",
        "pricing": {
            "text": {"prompt": "0.000003", "completion": "0.000015", "internal_reasoning": "0.00002"},
            "cache": {"read": "0.0000003"},
        },
    }
}


@dataclass
class Call:
    key: str
    item_id: str
    job: str
    kind: str
    request: dict[str, Any]


def _no_fetch(model: str, provider: str | None) -> Any:
    raise AssertionError("prices are preloaded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    calls = parser.parse_args().calls
    folder = Path(tempfile.mkdtemp(prefix="costs-bench-"))
    book = PriceBook(_no_fetch)
    book.put(parse_pricing(PRICING), None)
    guard = RunSpendGuard("bench", CostStore(folder / "costs.sqlite"), book, Budget(Decimal(1_000_000)))
    request = {"model": "bench-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}
    result = {
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 90,
            "prompt_tokens_details": {"cached_tokens": 600},
            "completion_tokens_details": {"reasoning_tokens": 40},
        }
    }
    started = time.perf_counter()
    for index in range(calls):
        call = Call(f"key{index}", f"item{index}", "job", "chat", request)
        assert guard.reserve(call)
        guard.settle(call, result)
    per_second = calls / (time.perf_counter() - started)
    guard.store.close()

    store = CostStore(folder / "costs.sqlite")
    started = time.perf_counter()
    write_ledger(store, folder / "ledger.parquet")
    export_per_second = calls / (time.perf_counter() - started)
    store.close()

    print(
        f"reserve+settle: {per_second:,.0f} calls/s (ratio vs {TARGET_CALLS_PER_SECOND:,}: "
        f"{per_second / TARGET_CALLS_PER_SECOND:.2f})"
    )
    print(
        f"ledger export:  {export_per_second:,.0f} rows/s (ratio vs {TARGET_EXPORT_ROWS_PER_SECOND:,}: "
        f"{export_per_second / TARGET_EXPORT_ROWS_PER_SECOND:.2f})"
    )


if __name__ == "__main__":
    main()
