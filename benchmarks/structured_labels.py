"""Structured labels: 2,000 rows labelled with a three-field schema against an emulator that breaks
10 % of its structured answers (the ``invalid_json`` fault at rate 0.1).

The run is planned and executed as `relaybatch run` does it (plan_run, open_run with its spend
guard, the ledger and results written), against the in-process emulator. Prints, and checks:

- valid after re-asks: items done with a document that fits (target >= 99 %);
- wasted: the ledger's rows marked ``wasted``, their sum against the emulator's bill for the answers
  it broke (target: equal, to the last decimal);
- the results Parquet's typed columns, read with pyarrow: ``answer_sentiment`` dictionary<int32,
  string>, ``answer_confidence`` double, ``answer_sarcastic`` bool, ``answer_json`` string.

    .venv/bin/python benchmarks/structured_labels.py [--rows 2000] [--rate 0.1] [--kind chat] [--replan]

With ``--replan``, a second run of the job over new rows is planned from the first run's ledger
(answer length and calls an item, re-asks included) and billed (target: within 25 %).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import SecretStr

from relaybatch.costs.observed import observed_outputs
from relaybatch.costs.plan import make_plan, output_notes
from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.config import FaultRule, FaultsConfig
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.manifests import load_items
from relaybatch.run import export_run_results, open_run, plan_run
from relaybatch.settings import EMULATOR_DEMO_KEY, run_paths

LABEL = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "sarcastic": {"type": "boolean"},
    },
    "required": ["sentiment", "confidence", "sarcastic"],
    "additionalProperties": False,
}
MODELS = {
    "chat": "relay-chat-small",
    "responses": "relay-chat-small",
    "messages": "relay-claude-haiku",
    "generate_content": "relay-gemini-flash",
}
EXPECTED_TYPES = {
    "answer_sentiment": pa.dictionary(pa.int32(), pa.string()),
    "answer_confidence": pa.float64(),
    "answer_sarcastic": pa.bool_(),
    "answer_json": pa.string(),
}


def write_manifest(folder: Path, rows: int, kind: str, name: str = "labels", first: int = 0) -> Path:
    data = folder / f"{name}.jsonl"
    with data.open("w", encoding="utf-8") as handle:
        for number in range(first, first + rows):
            handle.write(json.dumps({"id": f"r{number}", "text": f"review {number}: it was fine"}) + "\n")
    request = {"max_tokens": 200} if kind == "messages" else {}
    job = {
        "name": "labels",
        "kind": kind,
        "model": MODELS[kind],
        "prompt": "Label this review: {text}",
        "request": request,
        "output_schema": LABEL,
        "data": f"{name}.jsonl",
    }
    manifest = folder / f"{name}.yaml"
    manifest.write_text(json.dumps({"run": {"concurrency": 32}, "jobs": [job]}), encoding="utf-8")
    return manifest


async def replan(runs: Path, folder: Path, rows: int, rate: float, kind: str) -> bool:
    """A second run of the job over new rows, planned from the first run's ledger (its answers'
    length and its calls an item, re-asks included) before it is sent: expected against billed."""
    config = load_config()
    config.faults = FaultsConfig(seed=31, rules=[FaultRule(fault="invalid_json", rate=rate)])
    app = create_app(config)
    manifest = write_manifest(folder, rows, kind, name="labels-again", first=rows)
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=app),
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        plan = await make_plan(load_items(manifest), client, observed=observed_outputs(runs))
        async with open_run(plan_run(manifest, runs).paths, client=client) as opened:
            await opened.execute()
    billed = sum(
        (charge.usd for charge in app.state.emulator.ledger if charge.model == MODELS[kind]), Decimal(0)
    )
    ratio = plan.expected_usd / billed
    for note in output_notes(plan):
        print(f"  second run's plan: {note}")
    print(f"  second run: expected {plan.expected_usd:.6f} USD, billed {billed:.6f} USD, ratio {ratio:.3f}")
    return Decimal("0.75") <= ratio <= Decimal("1.25")


async def label(rows: int, rate: float, kind: str, again: bool = False) -> bool:
    config = load_config()
    config.faults = FaultsConfig(seed=30, rules=[FaultRule(fault="invalid_json", rate=rate)])
    app = create_app(config)
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder) / "runs"
        manifest = write_manifest(Path(folder), rows, kind)
        started = time.perf_counter()
        planned = plan_run(manifest, runs)
        async with (
            GatewayClient(
                "http://emulator.local",
                SecretStr(EMULATOR_DEMO_KEY),
                transport=httpx.ASGITransport(app=app),
                retry=RetryPolicy(max_attempts=1),
            ) as client,
            open_run(planned.paths, client=client) as opened,
        ):
            summary = await opened.execute()
        [results] = export_run_results(run_paths(runs, "labels"))
        seconds = time.perf_counter() - started
        ledger = pq.read_table(runs / "labels" / "ledger.parquet").to_pylist()
        table = pq.read_table(results)
        planned_again = await replan(runs, Path(folder), rows, rate, kind) if again else True
    broken = [charge for charge in app.state.emulator.ledger if charge.usage.get("fault") == "invalid_json"]
    billed_broken = sum((charge.usd for charge in broken), Decimal(0))
    wasted = sum((row["usd"] for row in ledger if row["wasted"]), Decimal(0))
    useful = sum((row["usd"] for row in ledger if not row["wasted"]), Decimal(0))
    done = summary.counts.get("done", 0)
    valid = sum(value is not None for value in table.column("answer_sentiment").to_pylist())
    types = {name: table.schema.field(name).type for name in EXPECTED_TYPES}
    share = done / rows
    print(f"kind {kind}, {rows:,} rows, invalid_json rate {rate:.0%}: {seconds:.1f} s")
    calls = len(app.state.emulator.ledger)
    print(f"  calls billed {calls:,} (broken {len(broken):,}), ledger rows {len(ledger):,}")
    print(f"  valid after re-asks {done:,} / {rows:,} = {share:.2%} (target >= 99 %; {valid:,} typed rows)")
    print(f"  failed invalid_output {summary.counts.get('failed', 0):,}")
    wasted_rows = sum(bool(row["wasted"]) for row in ledger)
    print(f"  spend useful {useful} USD, wasted {wasted} USD ({wasted_rows:,} rows)")
    print(f"  emulator's bill for the broken answers {billed_broken} USD: equal {wasted == billed_broken}")
    print(f"  typed columns {', '.join(f'{name}: {data_type}' for name, data_type in types.items())}")
    typed_ok = types == EXPECTED_TYPES
    print(f"  typed columns as expected: {typed_ok}")
    return share >= 0.99 and wasted == billed_broken and typed_ok and valid == done and planned_again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--kind", choices=sorted(MODELS), default="chat")
    parser.add_argument(
        "--replan", action="store_true", help="then plan a second run from the first one's ledger, and run it"
    )
    options = parser.parse_args()
    ok = asyncio.run(label(options.rows, options.rate, options.kind, options.replan))
    print(f"target met: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
