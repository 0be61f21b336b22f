"""Plan accuracy: `relaybatch plan`'s expected and worst case against what the emulator bills.

For every example manifest (configs/manifests), the plan is made with the run's cost model, the
manifest is run against an in-process emulator, and the emulator's ledger is summed per model
(web search per route). Prints, per (manifest, kind, model): billed, expected, worst case, the
expected/billed ratio (target 0.75-1.25) and whether worst >= billed (target: always).

    .venv/bin/python benchmarks/plan_accuracy.py [MANIFEST ...]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import httpx
from pydantic import SecretStr

from relaybatch.costs.plan import make_plan
from relaybatch.costs.reconcile import WEB_SEARCH_LABEL, gateway_charge
from relaybatch.emulator import create_app, load_config
from relaybatch.engine import CheckpointStore, EngineSettings, execute
from relaybatch.engine.poller import PollSettings
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.manifests import load_items
from relaybatch.settings import EMULATOR_DEMO_KEY

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = [*sorted((ROOT / "configs" / "manifests").glob("*.yaml")), ROOT / "configs" / "demo.csv"]
FAST_MEDIA = {
    "video": {
        "queued_seconds": 0.05,
        "render_seconds_base": 0.1,
        "render_seconds_per_video_second": 0.0,
        "v1_pending_seconds": 0.05,
        "v1_processing_seconds": 0.1,
    }
}
SETTINGS = EngineSettings(concurrency=8, poll=PollSettings(initial_seconds=0.02, max_seconds=0.05))


def _label(kind: str, model: str) -> str:
    return WEB_SEARCH_LABEL if kind == "web_search" else model


async def compare(manifest: Path) -> list[tuple[str, str, Decimal, Decimal, Decimal]]:
    """(kind, model, billed, expected, worst) per model of one manifest."""
    config = load_config()
    config.media = FAST_MEDIA
    app = create_app(config)
    transport = httpx.ASGITransport(app=app)
    items = load_items(manifest)
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=transport,
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        plan = await make_plan(items, client)
        with tempfile.TemporaryDirectory() as folder:
            store = CheckpointStore(Path(folder) / "checkpoint.sqlite")
            try:
                store.add_items(items)
                await execute(store, client, settings=SETTINGS)
            finally:
                store.close()
    billed: dict[str, Decimal] = defaultdict(Decimal)
    for entry in app.state.emulator.ledger:
        label, usd = gateway_charge(entry)
        billed[label] += usd
    planned: dict[str, tuple[set[str], Decimal, Decimal]] = {}
    for job in plan.jobs:
        label = _label(job.kind, job.model)
        kinds, expected, worst = planned.get(label, (set(), Decimal(0), Decimal(0)))
        planned[label] = (kinds | {job.kind}, expected + job.expected_usd, worst + job.worst_usd)
    rows = [
        ("+".join(sorted(kinds)), label, billed.pop(label, Decimal(0)), expected, worst)
        for label, (kinds, expected, worst) in planned.items()
    ]
    return rows + [("?", label, usd, Decimal(0), Decimal(0)) for label, usd in billed.items()]


def main(paths: list[Path]) -> int:
    worst_ok = expected_ok = True
    print(
        f"{'manifest':<22} {'kind':<17} {'model':<20} {'billed':>10} {'expected':>10} {'ratio':>6} "
        f"{'worst':>10} worst>=billed"
    )
    for manifest in paths:
        for kind, model, billed, expected, worst in asyncio.run(compare(manifest)):
            ratio = expected / billed if billed else Decimal(0)
            ok = worst >= billed
            worst_ok &= ok
            expected_ok &= Decimal("0.75") <= ratio <= Decimal("1.25")
            print(
                f"{manifest.name:<22} {kind:<17} {model:<20} {billed:>10.6f} {expected:>10.6f} "
                f"{ratio:>6.3f} {worst:>10.6f} {'yes' if ok else 'NO'}"
            )
    print(f"worst case >= billed everywhere: {worst_ok}; expected within 25 %: {expected_ok}")
    return 0 if worst_ok and expected_ok else 1


if __name__ == "__main__":
    sys.exit(main([Path(arg) for arg in sys.argv[1:]] or MANIFESTS))
