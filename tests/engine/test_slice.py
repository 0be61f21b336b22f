"""The thin slice without Prefect: CSV manifest -> items -> engine -> emulator -> SQLite -> Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.gateway import GatewayClient
from relaybatch.manifests import load_items

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo.csv"


async def test_demo_manifest_runs_end_to_end(
    tmp_path: Path, client: GatewayClient, emulator_app: Starlette
) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.sqlite")
    assert store.add_items(load_items(DEMO)) == 3

    summary = await execute(store, client)

    assert summary.counts == {"done": 3}
    assert emulator_app.state.emulator.total_requests == 3
    [path] = export_results(store, tmp_path / "results")
    table = pq.read_table(path).to_pylist()
    assert [row["item_id"] for row in table] == ["q1", "q2", "q3"]
    assert all(row["state"] == "done" and row["output_text"] for row in table)
    assert all(row["input_tokens"] > 0 for row in table)


async def test_second_run_sends_nothing_for_done_items(
    tmp_path: Path, client: GatewayClient, emulator_app: Starlette
) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.sqlite")
    store.add_items(load_items(DEMO))
    await execute(store, client)

    assert store.add_items(load_items(DEMO)) == 0
    summary = await execute(store, client)

    assert summary.sent == 0
    assert emulator_app.state.emulator.total_requests == 3


async def test_interrupted_send_is_not_resent(
    tmp_path: Path, client: GatewayClient, emulator_app: Starlette
) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.sqlite")
    store.add_items(load_items(DEMO))
    first = store.keys_in_state("pending")[0]
    store.transition(first, "sending", attempts=1)  # as if the process died mid-request

    summary = await execute(store, client)

    assert summary.counts == {"done": 2, "uncertain": 1}
    assert store.item(first)["state"] == "uncertain"
    assert emulator_app.state.emulator.total_requests == 2
