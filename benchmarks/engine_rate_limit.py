"""The shared limiter against an emulator-enforced limit of 1,200 requests per minute, 300 ms latency.

Three runs of 60 s each (targets from issue 6):
  exact      limit configured right (1,200 rpm)      -> >= 98 % of the limit, < 0.5 % of responses 429
  too-high   limit configured 5 x too high (6,000)   -> >= 90 % of the true limit, < 1 % 429, nothing lost
  none       no limit configured (learned)           -> >= 90 % of the true limit, < 1 % 429, nothing lost

The emulator runs in this process (httpx.ASGITransport) with a sliding 60 s window per account; every
request carries ``x-emulator-fault: latency=0.3``. Achieved throughput = successful answers to
requests sent in the first 60 s, divided by 1,200. After 60 s the run is stopped (as Ctrl-C would)
and every item must be done or still pending: nothing failed, nothing uncertain.

    .venv/bin/python benchmarks/engine_rate_limit.py [--seconds 60] [--scenario exact|too-high|none|all]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import httpx
from bench_items import chat_items
from pydantic import SecretStr
from recording_bucket import RecordingBucket

from relaybatch.emulator import create_app, load_config
from relaybatch.emulator.config import AccountConfig
from relaybatch.engine import CheckpointStore, EngineSettings, execute
from relaybatch.gateway import GatewayClient

LIMIT_RPM = 1200
LATENCY = "0.3"
SCENARIOS = {"exact": 1200, "too-high": 6000, "none": None}
TARGETS = {"exact": (0.98, 0.005), "too-high": (0.90, 0.01), "none": (0.90, 0.01)}


async def scenario(name: str, seconds: float, folder: Path) -> dict[str, float]:
    config = load_config()
    config.accounts.append(
        AccountConfig(
            name="bench", api_keys=["rb-bench-key"], balance_usd=Decimal("1000"), rate_limit_rpm=LIMIT_RPM
        )
    )
    app = create_app(config)
    bucket = RecordingBucket(SCENARIOS[name])
    store = CheckpointStore(folder / name / "checkpoint.sqlite")
    store.add_items(
        chat_items(int(LIMIT_RPM * seconds / 60 * 1.5) + 200, "rate", question="Item {}", carry=False)
    )
    stop = asyncio.Event()
    client = GatewayClient(
        "http://emulator.local",
        SecretStr("rb-bench-key"),
        transport=httpx.ASGITransport(app=app),
        limiter=bucket,
        headers={"x-emulator-fault": f"latency={LATENCY}"},
    )
    async with client:
        started = time.monotonic()
        asyncio.get_running_loop().call_later(seconds, stop.set)
        summary = await execute(
            store, client, settings=EngineSettings(concurrency=64), limiter=bucket, stop=stop
        )
    store.close()
    first = bucket.sent_at[0] if bucket.sent_at else started
    in_window = sum(1 for at in bucket.sent_at if at - first < seconds)
    answered = bucket.answers[:in_window]
    ok = sum(1 for _, status in answered if status == 200)
    limited = sum(1 for _, status in bucket.answers if status == 429)
    lost = summary.counts.get("failed", 0) + summary.counts.get("uncertain", 0)
    return {
        "ok": ok,
        "share": ok / (LIMIT_RPM * seconds / 60),
        "responses": len(bucket.answers),
        "429": limited,
        "429_share": limited / max(1, len(bucket.answers)),
        "lost": lost,
        "learned_rpm": bucket.requests_per_minute or 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="engine-rate-"))
    names = list(SCENARIOS) if options.scenario == "all" else [options.scenario]
    try:
        for name in names:
            result = asyncio.run(scenario(name, options.seconds, folder))
            share_target, limited_target = TARGETS[name]
            configured = SCENARIOS[name] or "none"
            print(
                f"{name:9} configured {configured}: {result['ok']:.0f} ok in {options.seconds:.0f} s = "
                f"{result['share']:.1%} of {LIMIT_RPM} rpm (target >= {share_target:.0%}, ratio "
                f"{result['share'] / share_target:.2f}); 429s {result['429']:.0f} of "
                f"{result['responses']:.0f} responses = {result['429_share']:.2%} "
                f"(target < {limited_target:.1%}); lost {result['lost']:.0f}; "
                f"bucket rate at the end {result['learned_rpm']:.0f} rpm"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
