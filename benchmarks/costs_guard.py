"""Spend guard overhead per billed call, and ledger export speed.

Target: the guard must never be what limits a run. The gateway client sustains about 2,000
requests per second (shared/research/http-client.md), so reserve + settle (price the usage,
commit the ledger row, update the budget) must sustain 2,000 calls per second on one core.
The ledger Parquet is exported once, when the run ends: at 20,000 rows per second it adds at
most a tenth to the time a run of the same size takes at 2,000 calls per second.

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

from relaybatch.cost_model.budget import Budget
from relaybatch.cost_model.pricing import PriceBook, parse_pricing
from relaybatch.costs.guard import RunSpendGuard
from relaybatch.costs.ledger import CostStore, write_ledger

TARGET_CALLS_PER_SECOND = 2_000
TARGET_EXPORT_ROWS_PER_SECOND = 20_000
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
    attempt: int = 1


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
    started, cpu_started = time.perf_counter(), time.process_time()
    for index in range(calls):
        call = Call(f"key{index}", f"item{index}", "job", "chat", request)
        assert guard.reserve(call)
        guard.settle(call, result)
    per_second = calls / (time.perf_counter() - started)
    per_cpu_second = calls / (time.process_time() - cpu_started)
    guard.store.close()

    store = CostStore(folder / "costs.sqlite")
    started, cpu_started = time.perf_counter(), time.process_time()
    write_ledger(store, folder / "ledger.parquet")
    export_per_second = calls / (time.perf_counter() - started)
    export_per_cpu_second = calls / (time.process_time() - cpu_started)
    store.close()

    # CPU-time rates too: on a shared, loaded machine wall time measures the neighbours.
    for name, rate, cpu_rate, target in (
        ("reserve+settle calls", per_second, per_cpu_second, TARGET_CALLS_PER_SECOND),
        ("ledger export rows", export_per_second, export_per_cpu_second, TARGET_EXPORT_ROWS_PER_SECOND),
    ):
        print(
            f"{name}: {rate:,.0f}/s wall (ratio {rate / target:.2f}), "
            f"{cpu_rate:,.0f}/s of CPU (ratio {cpu_rate / target:.2f}) vs target {target:,}/s"
        )


if __name__ == "__main__":
    main()
