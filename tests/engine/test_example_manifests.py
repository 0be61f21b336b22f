"""Every example manifest under configs/manifests runs end to end against the emulator, then exports."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pyarrow.parquet as pq
import pytest
from engine_fakes import FAST, ClientFactory
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.manifests import Kind, load_items

# Null in these runs by what the emulator sends or by the run, not by construction.
# reused_from: only items that took another run's answer (run.reuse) have one.
MAY_BE_EMPTY = {"cost_usd", "error", "cached_tokens", "reasoning_tokens", "reused_from"}
MANIFESTS = sorted((Path(__file__).resolve().parents[2] / "configs" / "manifests").glob("*.*"))


def test_the_examples_cover_every_kind() -> None:
    kinds = {item.kind for item in load_items(MANIFESTS[0].with_name("everything.yaml"))}
    assert kinds == set(get_args(Kind))


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda path: path.name)
async def test_example_manifest_runs_to_done_and_exports(
    manifest: Path, tmp_path: Path, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.sqlite")
    try:
        items = load_items(manifest)
        store.add_items(items)

        summary = await execute(store, make_client(), settings=FAST)

        failures = {row["item_id"]: row["last_error"] for row in store.iter_items() if row["state"] != "done"}
        assert failures == {}
        assert summary.counts == {"done": len(items)}
        paths = export_results(store, tmp_path / "results")
        tables = [pq.read_table(path) for path in paths]
        assert sum(table.num_rows for table in tables) == len(items)
        for table in tables:
            # No column is empty by construction (cost: no spend guard here; error: all done).
            empty = [
                name
                for name in table.column_names
                if table.column(name).null_count == table.num_rows and name not in MAY_BE_EMPTY
            ]
            assert empty == [], f"always-null columns {empty}"
            for paths_of_row in (
                table.column("media_paths").to_pylist() if "media_paths" in table.column_names else []
            ):
                assert all((tmp_path / path).stat().st_size > 0 for path in paths_of_row)
        creates = [
            n for (method, _, _), n in fast_app.state.emulator.requests.counts.items() if method == "POST"
        ]
        assert all(count == 1 for count in creates)
    finally:
        store.close()
