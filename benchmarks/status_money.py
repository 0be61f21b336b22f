"""What the money part of `relaybatch status` costs on a big run: the run's cost store read
read-only and summed as the report sums it (``run_money``), against the budget's own pass over the
same rows (``CostStore.spent`` made afresh) and the whole `relaybatch status` as a process.

Builds a run folder with ``--calls`` settled chat charges (plus 16 calls in flight) and as many
items, then prints seconds per step and the money's share of the status command.

    .venv/bin/python benchmarks/status_money.py [--calls 200000] [--repeat 3]

Timing figures are noisy on a shared machine: compare steps of one invocation, not runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from relaybatch.cost_model import Budgets, UsageCounts, price_call
from relaybatch.cost_model.price import CallCost
from relaybatch.cost_model.pricing import parse_pricing
from relaybatch.costs import CostStore, budget_settings
from relaybatch.costs.ledger import LedgerRow, build_row
from relaybatch.engine import CheckpointStore
from relaybatch.manifests import Item
from relaybatch.run.views import run_money

PRICES = parse_pricing(
    {"data": {"id": "relay-chat-small", "pricing": {"text": {"prompt": "1.5E-7", "completion": "6E-7"}}}}
)
START = datetime(2026, 11, 24, tzinfo=UTC)
BATCH = 10_000
RELAYBATCH = str(Path(sys.executable).parent / "relaybatch")


def charge(index: int, outcome: str = "charged") -> LedgerRow:
    usage = UsageCounts(input_tokens=10, output_tokens=30 + index % 7)
    in_flight = outcome == "reserved"
    return build_row(
        run="big",
        job=f"job-{index % 4}",
        item_id=f"r{index}",
        item_key=f"{index:032x}",
        kind="chat",
        model="relay-chat-small",
        provider=None,
        usage=UsageCounts() if in_flight else usage,
        cost=CallCost((), "base", ("in flight",)) if in_flight else price_call(PRICES, usage),
        charged_at=START + timedelta(milliseconds=index),
        reserved_usd=Decimal("0.0000945"),
        outcome=outcome,
        call="attempt-1",
    )


def build(run_dir: Path, calls: int) -> None:
    store = CostStore(run_dir / "costs.sqlite")
    try:
        for start in range(0, calls, BATCH):
            store.record_many([charge(index) for index in range(start, min(calls, start + BATCH))])
        store.record_many([charge(calls + index, "reserved") for index in range(16)])
    finally:
        store.close()
    checkpoint = CheckpointStore(run_dir / "checkpoint.sqlite")
    try:
        for start in range(0, calls, BATCH):
            checkpoint.add_items(
                Item.build(
                    item_id=f"r{index}", job=f"job-{index % 4}", kind="chat", request={"n": index}, carry={}
                )
                for index in range(start, min(calls, start + BATCH))
            )
        checkpoint.save_run("big", budget_settings(Budgets(run_usd=Decimal("50"))))
    finally:
        checkpoint.close()


def best(repeat: int, step: Callable[[], object]) -> float:
    """The least CPU seconds of ``repeat`` runs of ``step`` (a loaded machine inflates wall time)."""
    times = []
    for _ in range(repeat):
        began = time.process_time()
        step()
        times.append(time.process_time() - began)
    return min(times)


def budget_pass(path: Path) -> object:
    store = CostStore.open_read_only(path)  # read-only: the sums are made afresh every time
    assert store is not None
    try:
        return store.spent()
    finally:
        store.close()


def status_process(runs: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `relaybatch status big` as a process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [RELAYBATCH, "status", "big", "--runs-dir", str(runs)],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder)
        run_dir = runs / "big"
        run_dir.mkdir()
        began = time.perf_counter()
        build(run_dir, args.calls)
        print(f"built {args.calls:,} charges and items in {time.perf_counter() - began:.1f} s")
        money = run_money(run_dir)
        assert money.spend.calls == args.calls + 16 and money.spend.in_flight == 16
        reading = best(args.repeat, lambda: run_money(run_dir))
        summing = best(args.repeat, lambda: budget_pass(run_dir / "costs.sqlite"))
        walls, cpus = zip(*(status_process(runs) for _ in range(args.repeat)), strict=True)
        per_call = reading / args.calls * 1e6
        print(f"run_money (read-only, the report's sums): {reading:.2f} s CPU ({per_call:.1f} us per call)")
        print(f"the budget's pass over the same rows (CostStore.spent): {summing:.2f} s CPU")
        print(f"relaybatch status as a process: {min(walls):.2f} s wall, {min(cpus):.2f} s CPU")
        print(f"money's share of the status command's CPU: {reading / min(cpus):.0%}")


if __name__ == "__main__":
    main()
