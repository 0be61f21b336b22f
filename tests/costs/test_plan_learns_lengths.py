"""`plan` learns a text job's answer length from earlier runs' ledgers of the same job and model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from pydantic import SecretStr
from starlette.applications import Starlette

from relaybatch.costs.observed import observed_outputs
from relaybatch.costs.plan import make_plan, output_notes
from relaybatch.gateway import GatewayClient
from relaybatch.gateway.retry import RetryPolicy
from relaybatch.manifests import load_items
from relaybatch.run import open_run, plan_run
from relaybatch.settings import EMULATOR_DEMO_KEY


def essays(folder: Path, run: str, first: int) -> Path:
    items = [{"id": f"e{n}", "topic": f"topic {n}"} for n in range(first, first + 4)]
    job = {
        "name": "essays",
        "kind": "chat",
        "model": "relay-chat-small",
        "prompt": "Write a 300-word essay about {topic}.",
        "request": {"max_tokens": 2000},
        "items": items,
    }
    path = folder / f"{run}.yaml"
    path.write_text(json.dumps({"run": {"name": run}, "jobs": [job]}), encoding="utf-8")
    return path


async def test_the_second_plan_expects_what_the_first_run_wrote(tmp_path: Path, fast_app: Starlette) -> None:
    runs = tmp_path / "runs"
    async with GatewayClient(
        "http://emulator.local",
        SecretStr(EMULATOR_DEMO_KEY),
        transport=httpx.ASGITransport(app=fast_app),
        retry=RetryPolicy(max_attempts=1),
    ) as client:
        first = await make_plan(
            load_items(essays(tmp_path, "first", 0)), client, observed=observed_outputs(runs)
        )
        async with open_run(plan_run(essays(tmp_path, "first", 0), runs).paths, client=client) as opened:
            await opened.execute()
        learnt = observed_outputs(runs)
        second = await make_plan(load_items(essays(tmp_path, "second", 4)), client, observed=learnt)

    written = [
        charge.usage["output"] for charge in fast_app.state.emulator.ledger if "output" in charge.usage
    ]
    assert learnt[("essays", "relay-chat-small")].calls == 4
    assert first.jobs[0].output_tokens == 4 * 40  # assumed, and said so
    assert "no earlier answers; assumed 40 output tokens" in output_notes(first)[0]
    assert second.jobs[0].output_tokens == 4 * round(sum(written) / 4)
    assert "output from 4 earlier answers in 1 earlier run" in output_notes(second)[0]


async def test_a_run_another_host_executes_is_learnt_from_its_ledger_file(
    tmp_path: Path, fast_app: Starlette
) -> None:
    """Its store is that host's while it runs (DESIGN.md invariant 11): its ledger.parquet is read."""
    import fcntl
    import os

    runs = tmp_path / "runs"
    async with (
        GatewayClient(
            "http://emulator.local",
            SecretStr(EMULATOR_DEMO_KEY),
            transport=httpx.ASGITransport(app=fast_app),
            retry=RetryPolicy(max_attempts=1),
        ) as client,
        open_run(plan_run(essays(tmp_path, "first", 0), runs).paths, client=client) as opened,
    ):
        await opened.execute()
    learnt = observed_outputs(runs)
    assert learnt[("essays", "relay-chat-small")].calls == 4
    folder = runs / "first"
    (folder / "costs.sqlite").write_bytes(b"not a database: opening it would fail")
    lock = folder / "execution.lock"
    lock.write_text(json.dumps({"activity": "executing run 'first'", "pid": 7, "host": "host-b"}))
    descriptor = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as host-b's execution holds it
        assert observed_outputs(runs) == learnt
    finally:
        os.close(descriptor)
