"""Every example manifest under configs/manifests runs end to end against the emulator, then exports."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_fakes import FAST, ClientFactory
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore, execute, export_results
from relaybatch.manifests import load_items

MANIFESTS = sorted((Path(__file__).resolve().parents[2] / "configs" / "manifests").glob("*.*"))


def test_the_examples_cover_every_kind() -> None:
    kinds = {item.kind for item in load_items(MANIFESTS[0].with_name("everything.yaml"))}
    assert kinds == {
        "chat",
        "responses",
        "messages",
        "generate_content",
        "image",
        "video",
        "video_v1",
        "judgment",
        "web_search",
    }


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
        assert sum(pq.read_table(path).num_rows for path in paths) == len(items)
        creates = [
            n for (method, _, _), n in fast_app.state.emulator.requests.counts.items() if method == "POST"
        ]
        assert all(count == 1 for count in creates)
    finally:
        store.close()
