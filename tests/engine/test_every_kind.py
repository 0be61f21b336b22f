"""One run with items of all nine kinds against the emulator: every item ends done, with its output."""

from __future__ import annotations

from engine_fakes import FAST, ClientFactory
from engine_items import every_kind
from starlette.applications import Starlette

from relaybatch.engine import CheckpointStore, execute


async def test_all_kinds_in_one_run_end_done(
    store: CheckpointStore, make_client: ClientFactory, fast_app: Starlette
) -> None:
    store.add_items(every_kind())

    summary = await execute(store, make_client(), settings=FAST)

    rows = {row["kind"]: row for row in store.iter_items()}
    failures = {kind: row["last_error"] for kind, row in rows.items() if row["state"] != "done"}
    assert failures == {}
    assert summary.counts == {"done": 9}
    assert rows["chat"]["result"]["output_text"]
    assert rows["image"]["result"]["media_paths"][0].startswith("media/")
    assert (store.path.parent / rows["video"]["result"]["media_paths"][0]).stat().st_size > 0
    assert rows["video"]["remote_id"]
    assert set(rows["judgment"]["result"]["answers"]) == {"complaint", "topic", "anger"}
    assert rows["web_search"]["result"]["search"]["results"]
