"""The flows under Prefect: artifacts in the UI, no secret stored, resume after an interruption."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relaybatch.connect import embedded_emulator
from relaybatch.settings import EMULATOR_DEMO_KEY

pytestmark = pytest.mark.usefixtures("prefect_harness")

CHAT = "/v1/chat/completions"


def write_manifest(folder: Path, name: str, rows: int) -> Path:
    path = folder / f"{name}.csv"
    lines = ["id,model,prompt,max_tokens"]
    lines += [f"r{n},relay-chat-small,{name} prompt number {n}.,16" for n in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


async def _artifacts_of(flow_run_id: object) -> list[dict[str, Any]]:
    from prefect import get_client

    async with get_client() as client:
        # The REST filter directly: this client's read_artifacts sends nulls the server refuses.
        response = await client.request(
            "POST",
            "/artifacts/filter",
            json={"artifacts": {"flow_run_id": {"any_": [str(flow_run_id)]}}, "limit": 50},
        )
        return list(response.json())


async def test_a_run_leaves_progress_and_summary_artifacts_and_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import get_client
    from relaybatch.flows import run_manifest

    monkeypatch.setenv("RELAYBATCH_API_KEY", EMULATOR_DEMO_KEY)
    manifest = write_manifest(tmp_path, "colours", 6)

    state = await run_manifest(manifest, runs_dir=tmp_path / "runs", return_state=True)

    outcome = await state.result()
    assert outcome.counts == {"done": 6}
    artifacts = await _artifacts_of(state.state_details.flow_run_id)
    by_type = {artifact["type"]: artifact for artifact in artifacts}
    assert by_type["progress"]["data"] == 100.0
    progress = by_type["progress"]["description"]
    for part in ("6 of 6 items finished", "elapsed ", "items/s", "spent 0.", "errors: none", "limit "):
        assert part in progress, progress
    summary = by_type["markdown"]["data"]
    assert "| done | 6 |" in summary and "## Timings" in summary and "| execute |" in summary
    results = (tmp_path / "runs" / "colours" / "results" / "colours.parquet").resolve()
    assert f"- `{results}`" in summary and "file://" not in summary  # a path as text, not a link
    tables = [artifact["data"] for artifact in artifacts if artifact["type"] == "table"]
    assert any('"done": 6' in table for table in tables)  # items per job and state
    assert any('"known_usd": "0.' in table for table in tables)  # spend by job and model, from the ledger
    async with get_client() as client:
        flow_run = await client.read_flow_run(state.state_details.flow_run_id)
    stored = [str(flow_run.parameters)] + [str(artifact) for artifact in artifacts]
    assert not any(EMULATOR_DEMO_KEY in text for text in stored)


async def test_an_interrupted_run_resumes_without_sending_anything_twice(tmp_path: Path) -> None:
    from relaybatch.flows import resume_run, run_manifest

    manifest = write_manifest(tmp_path, "interrupted", 300)
    log = embedded_emulator().state.emulator.requests.counts
    before = Counter(log)
    runs = tmp_path / "runs"
    checkpoint = runs / "interrupted" / "checkpoint.sqlite"

    flow_task = asyncio.create_task(run_manifest(manifest, runs_dir=runs))
    # Stop the run once it has started sending: what a cancelled or crashed worker leaves behind.
    while not flow_task.done() and _count_done(checkpoint) == 0:
        await asyncio.sleep(0.01)
    flow_task.cancel()
    await asyncio.gather(flow_task, return_exceptions=True)
    done_at_interrupt = _count_done(checkpoint)

    outcome = await resume_run("interrupted", runs_dir=runs)

    sent = Counter({entry: count for entry, count in (Counter(log) - before).items() if entry[1] == CHAT})
    assert done_at_interrupt > 0
    assert sum(outcome.counts.values()) == 300
    # Every item ends done, or uncertain when it may have been sent without a recorded answer;
    # and no request body reached the gateway twice.
    assert set(outcome.counts) <= {"done", "uncertain"}
    assert max(sent.values()) == 1
    # Done items were each sent; uncertain ones may or may not have reached the gateway.
    assert outcome.counts.get("done", 0) <= len(sent) <= 300


def _count_done(checkpoint: Path) -> int:
    if not checkpoint.exists():
        return 0
    connection = sqlite3.connect(f"{checkpoint.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(connection.execute("select count(*) from items where state = 'done'").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        connection.close()


async def test_export_and_cost_report_flows_on_an_existing_run(tmp_path: Path) -> None:
    from relaybatch.flows import cost_report, export_run, run_manifest

    manifest = write_manifest(tmp_path, "later", 3)
    await run_manifest(manifest, runs_dir=tmp_path / "runs")

    results = await export_run("later", runs_dir=tmp_path / "runs")
    lines = await cost_report("later", runs_dir=tmp_path / "runs")

    assert [path.name for path in results] == ["later.parquet"]
    assert all(line.usd >= 0 for line in lines)
