"""Plans of long answers: `relaybatch plan`'s expected cost against the bill, before and after the
job's first run taught it how long its answers are.

A chat job asks for 500-word essays (cap 2,000 tokens). Run 1 is planned with no earlier answers
(an answer is assumed to be 40 tokens), executed against the in-process emulator (which writes about
the length a prompt asks for), and billed. Run 2, the same job over new rows in its own run, is
planned from run 1's ledger (costs/observed.py) and billed. Prints each plan's expected cost, the
emulator's bill and their ratio (target for run 2: 0.75 to 1.25).

    .venv/bin/python benchmarks/plan_long_answers.py [--rows 200] [--words 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import httpx
from pydantic import SecretStr

from relaybatch.costs.observed import observed_outputs
from relaybatch.costs.plan import make_plan, output_notes
from relaybatch.emulator import create_app, load_config
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.manifests import load_items
from relaybatch.run import open_run, plan_run

TOPICS = ("rivers", "lanterns", "glaciers", "harbors", "meteors", "orchards", "bridges", "comets")


def write_manifest(folder: Path, run: str, first: int, rows: int, words: int) -> Path:
    items = [{"id": f"e{n}", "topic": f"{TOPICS[n % len(TOPICS)]} {n}"} for n in range(first, first + rows)]
    job = {
        "name": "essays",
        "kind": "chat",
        "model": "relay-chat-small",
        "prompt": f"Write a {words}-word essay about {{topic}}.",
        "request": {"max_tokens": 2000},
        "items": items,
    }
    path = folder / f"{run}.yaml"
    path.write_text(json.dumps({"run": {"name": run, "concurrency": 32}, "jobs": [job]}), encoding="utf-8")
    return path


async def plan_and_run(manifest: Path, runs: Path) -> tuple[Decimal, Decimal, list[str]]:
    """(expected USD, billed USD, the plan's output notes) of one run."""
    app = create_app(load_config())
    async with GatewayClient(
        "http://emulator.local",
        SecretStr("rb-demo-key"),
        transport=httpx.ASGITransport(app=app),
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        plan = await make_plan(load_items(manifest), client, observed=observed_outputs(runs))
        planned = plan_run(manifest, runs)
        async with open_run(planned.paths, client=client) as opened:
            await opened.execute()
    billed = sum(
        (charge.usd for charge in app.state.emulator.ledger if charge.route.endswith("/completions")),
        Decimal(0),
    )
    return plan.expected_usd, billed, output_notes(plan)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--words", type=int, default=500)
    options = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder) / "runs"
        for number, run in enumerate(("first", "second")):
            manifest = write_manifest(Path(folder), run, number * options.rows, options.rows, options.words)
            expected, billed, notes = asyncio.run(plan_and_run(manifest, runs))
            ratio = expected / billed
            ratios.append(ratio)
            print(f"run {run}: {options.rows} essays of {options.words} words")
            for note in notes:
                print(f"  plan: {note}")
            print(f"  expected {expected:.6f} USD, billed {billed:.6f} USD, expected/billed {ratio:.3f}")
    ok = Decimal("0.75") <= ratios[1] <= Decimal("1.25")
    print(f"second run planned within 25 % of its bill: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
